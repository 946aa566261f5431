// node-postgres and postgres.js against Prima's wire listener (bench/bi_clients/run.py runs it).
// Prints one JSON object {check: [got, ok, detail]}; expected values come from REST (argv).
import pg from "pg";
import postgres from "postgres";

const [port, password, expectedJson] = process.argv.slice(2);
const expected = JSON.parse(expectedJson);
const results = {};
const close = (a, b) => Math.abs(Number(a) - Number(b)) <= 1e-6 * Math.max(1, Math.abs(Number(b)));

async function check(name, run, ok) {
  try {
    const got = await run();
    results[name] = [JSON.stringify(got).slice(0, 160), ok(got), ""];
  } catch (e) {
    results[name] = [null, false, `${e.code || ""} ${String(e.message).slice(0, 300)}`];
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
await client.end();

const sql = postgres({ host: "127.0.0.1", port: Number(port), user: "bi", password, database: "prima", max: 1 });
await check("postgres.js: IN ${sql([...])}", async () => (await sql`SELECT COUNT(*) AS n FROM people WHERE education IN ${sql(["hs", "phd"])}`)[0].n,
  (got) => close(got, expected.count_hs_phd));
await check("postgres.js: Date parameter", async () => (await sql`SELECT COUNT(*) AS n FROM staff WHERE hired >= ${new Date(Date.UTC(2020, 0, 1))}`)[0].n,
  (got) => close(got, expected.staff_since_2020));
await sql.end();
console.log(JSON.stringify(results));
