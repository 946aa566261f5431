// node-postgres and postgres.js against Prima's wire listener (bench/bi_clients/run.py runs it).
// Prints one JSON object {"checks": {check: [got, ok, detail]}, "statements": {pg: {...}, postgres.js: {...}}}:
// the shared statements (statements.json, written by the harness) run through both drivers' own binding,
// compared with REST by the harness; expected values for the checks below come from REST (argv).
import { readFileSync } from "node:fs";
import pg from "pg";
import postgres from "postgres";

const [port, password, expectedPath, statementsPath] = process.argv.slice(2);
const expected = JSON.parse(readFileSync(expectedPath, "utf8"));
const statements = JSON.parse(readFileSync(statementsPath, "utf8"));
const results = {};
const outcomes = { pg: {}, "postgres.js": {} };
const close = (a, b) => Math.abs(Number(a) - Number(b)) <= 1e-6 * Math.max(1, Math.abs(Number(b)));

async function check(name, run, ok) {
  try {
    const got = await run();
    results[name] = [JSON.stringify(got).slice(0, 160), ok(got), ""];
  } catch (e) {
    results[name] = [null, false, `${e.code || ""} ${String(e.message).slice(0, 300)}`];
  }
}

// A tagged parameter as JS: a Date at UTC midnight for a date (what a JS user passes), arrays as arrays.
// postgres.js types a parameter by its first element on the client (a Date array as one timestamptz,
// which fails in the driver before anything is sent, as it would against PostgreSQL): its users pass
// date arrays as 'YYYY-MM-DD' strings, typed by the server.
function value(p, datesAsText = false) {
  if (p === null || typeof p !== "object") return p;
  const [tag, v] = Object.entries(p)[0];
  if (tag === "date") return new Date(`${v}T00:00:00Z`);
  if (tag === "date[]") return datesAsText ? v : v.map((d) => new Date(`${d}T00:00:00Z`));
  return v;
}

async function runAll(name, execute, datesAsText = false) {
  for (const s of statements) {
    try {
      const rows = await execute(s.sql, s.params.map((p) => value(p, datesAsText)));
      outcomes[name][s.name] = { rows: rows.map((r) => Object.values(r).map((c) => (c instanceof Date ? c.toISOString() : c))) };
    } catch (e) {
      outcomes[name][s.name] = { error: [e.code || null, String(e.message).slice(0, 400)] };
    }
  }
}

const client = new pg.Client({ host: "127.0.0.1", port: Number(port), user: "bi", password, database: "prima" });
await client.connect();
await check("pg: Date parameter", async () => (await client.query(
  "SELECT COUNT(*) AS n FROM staff WHERE hired >= $1", [new Date(Date.UTC(2020, 0, 1))])).rows[0].n,
  (got) => close(got, expected.staff_since_2020));
await check("pg: = ANY($1)", async () => (await client.query(
  "SELECT COUNT(*) AS n FROM people WHERE education = ANY($1)", [["hs", "phd"]])).rows[0].n,
  (got) => close(got, expected.count_hs_phd));
await runAll("pg", async (sql, params) => (await client.query(sql, params)).rows);
await client.end();

const sql = postgres({ host: "127.0.0.1", port: Number(port), user: "bi", password, database: "prima", max: 1 });
await check("postgres.js: IN ${sql([...])}", async () => (await sql`SELECT COUNT(*) AS n FROM people WHERE education IN ${sql(["hs", "phd"])}`)[0].n,
  (got) => close(got, expected.count_hs_phd));
await check("postgres.js: Date parameter", async () => (await sql`SELECT COUNT(*) AS n FROM staff WHERE hired >= ${new Date(Date.UTC(2020, 0, 1))}`)[0].n,
  (got) => close(got, expected.staff_since_2020));
await check("postgres.js: = ANY(${[...]})", async () => (await sql`SELECT COUNT(*) AS n FROM people WHERE education = ANY(${["hs", "phd"]})`)[0].n,
  (got) => close(got, expected.count_hs_phd));
await runAll("postgres.js", async (text, params) => await sql.unsafe(text, params), true);
await sql.end();
console.log(JSON.stringify({ checks: results, statements: outcomes }));
