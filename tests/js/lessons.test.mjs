// The shipped comparison lesson (lesson 4), as its formula panel reads it: for every policy, R from the
// run's own times (τ / (v + δ·c + o) over plain decoding's step) within 25 % of the speedup it measured.
import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import { test } from "node:test";
import { gunzipSync } from "node:zlib";

import { ownTimesSpeedup } from "../../static/js/model/timesplit.js";

const TRACE = new URL("../../static/traces/lesson-4-compare.jsonl.gz", import.meta.url);

function runsOf(path) {
  const events = gunzipSync(readFileSync(path)).toString("utf8").split("\n").filter((l) => l.trim()).map((l) => JSON.parse(l));
  const runs = new Map();
  for (const event of events) {
    if (!runs.has(event.run_id)) runs.set(event.run_id, []);
    runs.get(event.run_id).push(event);
  }
  return [...runs.values()];
}

test("lesson_4s_timed_R_agrees_with_each_policys_measured_speedup_within_a_quarter", () => {
  const runs = runsOf(TRACE);
  const plain = runs.find((run) => run[0].drafter === "none");
  const plainSpeed = plain.find((e) => e.type === "run_finished").tokens_per_s;
  assert.ok(runs.length >= 5);
  for (const run of runs) {
    const measured = run.find((e) => e.type === "run_finished").tokens_per_s / plainSpeed;
    const { R } = ownTimesSpeedup(run, { arEvents: plain });
    assert.ok(Math.abs(R / measured - 1) <= 0.25, `${run[0].policy}: R ${R} against ${measured} measured`);
  }
});
