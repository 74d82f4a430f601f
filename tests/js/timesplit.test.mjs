// The time split and the cost-aware speedup: each step's draft, verify and other ms from its
// step_metrics, the run's totals, and R = τ / (verify(n)/verify(1) + δ·c) from the run's own times.
import assert from "node:assert/strict";
import { test } from "node:test";

import { costAwareSpeedup, oneTokenForward, ownTimesSpeedup, sharedNote, stepTimes, timeTotals } from "../../static/js/model/timesplit.js";

const metric = (step, { draft = 0, forward = 0, forwards = 0, verify, other = 0, size = 0, emitted = 1 }) => ({
  type: "step_metrics", step, draft_ms: draft, draft_forward_ms: forward, draft_forwards: forwards, verify_ms: verify,
  other_ms: other, tree_size: size, emitted, accepted: emitted - 1,
});
const ar = [metric(1, { verify: 40 }), metric(2, { verify: 42 }), metric(3, { verify: 38 })];
const talon = [metric(1, { draft: 10, forward: 8, forwards: 4, verify: 70, other: 4, size: 60, emitted: 3 }),
               metric(2, { draft: 12, forward: 8, forwards: 4, verify: 78, other: 6, size: 60, emitted: 5 })];

test("a_steps_time_splits_into_draft_verify_and_other_as_its_metrics_report", () => {
  const [first] = stepTimes(talon);
  assert.deepEqual(first, { step: 1, draft: 10, verify: 70, other: 4, total: 84, draftForwardMs: 8, draftForwards: 4, treeTokens: 61, shared: 1 });
  const totals = timeTotals(stepTimes(talon));
  assert.equal(totals.total, 180);
  assert.equal(totals.verify, 148);
  assert.ok(Math.abs(totals.share.draft + totals.share.verify + totals.share.other - 1) < 1e-12);
  assert.equal(timeTotals([]), null);
});

test("a_run_verified_in_a_servers_batch_says_so_and_a_run_alone_says_nothing", () => {
  assert.equal(sharedNote(stepTimes(talon)), null);
  const batched = [{ ...talon[0], shared: 4 }, talon[1]];
  assert.equal(sharedNote(stepTimes(batched)),
               "1 of 2 steps were verified in one forward with other runs' trees (up to 4 requests): their verify times are the shared forward's.");
});

test("time_outside_the_forwards_counts_on_both_sides_in_units_of_plain_decodings_step", () => {
  const R = costAwareSpeedup({ tau: 3, delta: 4, verifyMs: 60, draftForwardMs: 2, outsideMs: 6, oneTokenMs: 38, plainOutsideMs: 2 });
  assert.ok(Math.abs(R - 3 / ((60 + 8 + 6) / 40)) < 1e-12);
  // Plain decoding against itself, outside time and all: exactly 1.
  assert.equal(costAwareSpeedup({ tau: 1, delta: 0, verifyMs: 38, draftForwardMs: null, outsideMs: 2, oneTokenMs: 38, plainOutsideMs: 2 }), 1);
});

test("cost_aware_speedup_prices_the_tree_at_its_measured_verify_time", () => {
  const R = costAwareSpeedup({ tau: 3, delta: 4, verifyMs: 60, draftForwardMs: 2, oneTokenMs: 40 });
  assert.ok(Math.abs(R - 3 / (1.5 + 0.2)) < 1e-12);
  // Plain decoding against itself: exactly 1; no draft forwards need no c.
  assert.equal(costAwareSpeedup({ tau: 1, delta: 0, verifyMs: 40, draftForwardMs: null, oneTokenMs: 40 }), 1);
  assert.equal(costAwareSpeedup({ tau: 3, delta: 4, verifyMs: 60, draftForwardMs: 2, oneTokenMs: null }), null);
});

test("one_token_forward_comes_from_plain_decodings_run_else_the_cost_table", () => {
  assert.deepEqual(oneTokenForward({ arEvents: ar }), { ms: 40, source: "plain decoding's run", outsideMs: 0 });
  const costs = { source: "measured", context: 64, ns: [1, 2, 4], target_ms: [41, 43, 47], draft_ms: [4, 4, 5] };
  assert.deepEqual(oneTokenForward({ costs }), { ms: 41, source: "cost table (measured)" });
  assert.equal(oneTokenForward({}), null);
});

test("a_wide_tree_that_doubles_the_verify_time_predicts_what_the_run_measured", () => {
  const own = ownTimesSpeedup(talon, { arEvents: ar });
  // τ 4, δ 4 over plain decoding's step of 40 ms (no time outside its forward): v = 74 / 40,
  // c = 2 / 40, o = ((10 − 8 + 4) + (12 − 8 + 6)) / 2 / 40 = 8 / 40: R = 4 / (1.85 + 0.2 + 0.2).
  assert.equal(own.tau, 4);
  assert.equal(own.delta, 4);
  assert.ok(Math.abs(own.verifyRatio - 1.85) < 1e-12);
  assert.ok(Math.abs(own.o - 0.2) < 1e-12);
  assert.ok(Math.abs(own.R - 4 / 2.25) < 1e-12);
  // Before the first step there is nothing to predict from.
  assert.equal(ownTimesSpeedup([], { arEvents: ar }).R, null);
  assert.equal(ownTimesSpeedup(talon).R, null);
});

test("plain_decodings_run_summary_gives_verify_1_when_its_events_are_not_at_hand", () => {
  assert.deepEqual(oneTokenForward({ arFinished: { steps: 4, verify_ms: 164, other_ms: 8 } }),
                   { ms: 41, source: "plain decoding's run", outsideMs: 2 });
});
