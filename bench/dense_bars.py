"""Dense-table defaults on real data: accuracy and honesty of bars by how many columns a query constrains.

UCI Adult (adult.data + adult.test, 48,842 rows) as a 5-dimension table — age/5 × education-num ×
hours/10 × sex × race, 38,400 cells, COUNT only (all of ε) — registered and queried through the
library with `pairwise` (today's default for dense tables), `cuboids` (the wide-table default) and
`identity`; 200 random range COUNTs constraining k = 2, 3 and 5 columns, 3 seeded builds, ε = 1
and 10. Prints MAE and the coverage of each answer's ci95 (raw, unclamped answers), and writes
bench/results/dense_bars.md.

Run: .venv/bin/python bench/dense_bars.py
"""

from __future__ import annotations

import csv
import sys
import tempfile
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.shared_data import adult_rows  # noqa: E402
from engine.service import Prima  # noqa: E402
from storage.schema import TableSpec  # noqa: E402

RACES=["Amer-Indian-Eskimo","Asian-Pac-Islander","Black","Other","White"]
tmp=tempfile.mkdtemp(); path=tmp+"/a5.csv"
rows=adult_rows()
with open(path,"w",newline="") as f:
    w=csv.writer(f); w.writerow(["age","education_num","hours","sex","race"])
    for r in rows: w.writerow([r[0],r[4],r[12],r[9],r[8]])
dims=[{"name":"age","type":"int","lo":0,"hi":119,"bin":5},{"name":"education_num","type":"int","lo":1,"hi":16},
      {"name":"hours","type":"int","lo":0,"hi":99,"bin":10},{"name":"sex","type":"category","values":["Female","Male"]},
      {"name":"race","type":"category","values":RACES}]
x=np.zeros((24,16,10,2,5))
for r in rows: x[min(int(r[0])//5,23), int(r[4])-1, min(int(r[12])//10,9), 0 if r[9]=="Female" else 1, RACES.index(r[8])]+=1
rng=np.random.default_rng(7)
def q(k):
    axes=rng.choice(5,k,replace=False); conds=[]; sl=[slice(None)]*5
    for a in axes:
        n=x.shape[a]; lo,hi=sorted(rng.integers(0,n,2))
        if a==0: conds.append(f"age BETWEEN {lo*5} AND {hi*5+4}")
        elif a==1: conds.append(f"education_num BETWEEN {lo+1} AND {hi+1}")
        elif a==2: conds.append(f"hours BETWEEN {lo*10} AND {hi*10+9}")
        elif a==3: conds.append("sex IN (" + ",".join(f"'{v}'" for v in ["Female","Male"][lo:hi+1]) + ")")
        else: conds.append("race IN (" + ",".join(f"'{v}'" for v in RACES[lo:hi+1]) + ")")
        sl[a]=slice(lo,hi+1)
    return "SELECT COUNT(*) FROM a5 WHERE " + " AND ".join(conds), float(x[tuple(sl)].sum())
W={k:[q(k) for _ in range(200)] for k in (2,3,5)}
lines = ["# Dense-table strategies on Adult-5: accuracy and bar coverage by constrained columns", "",
         "`.venv/bin/python bench/dense_bars.py` — 38,400 cells, COUNT with all of ε, 200 random range COUNTs "
         "per k, 3 seeded builds; MAE and coverage of each answer's ci95.", "",
         "| ε | strategy | k=2 MAE | k=2 cov. | k=3 MAE | k=3 cov. | k=5 MAE | k=5 cov. |", "|---|---|---|---|---|---|---|---|"]
for eps in (1.0, 10.0):
  for strat in ("pairwise","cuboids","identity"):
    errs={k:[] for k in W}; cov={k:[] for k in W}
    for b in range(3):
        p=Prima(tempfile.mkdtemp()+"/d", seed=300+b)
        p.register(TableSpec.model_validate({"name":"a5","source":{"csv":path},"epsilon":eps,"dimensions":dims,"cube":{"strategy":strat}}))
        for k in W:
            for sql,t in W[k]:
                r=p.query(sql, clamp=False); v=r["rows"][0][0]; lo,hi=r["ci95"][0][0]
                errs[k].append(abs(v-t)); cov[k].append(lo<=t<=hi)
        p.close()
    print(f"eps={eps} {strat:9s} " + "  ".join(f"k={k}: MAE {np.mean(errs[k]):7.1f} cov {np.mean(cov[k]):.2f}" for k in W), flush=True)
    lines.append(f"| {eps:g} | {strat} | " + " | ".join(f"{np.mean(errs[k]):.1f} | {np.mean(cov[k]):.2f}" for k in W) + " |")
text = "\n".join(lines) + "\n"
(Path(__file__).resolve().parent / "results" / "dense_bars.md").write_text(text)
print(text)
