// Theory maths: the mask and position ids as engine/tree.py builds them, the KV cache around a step,
// the walk's numbers, α, Leviathan's τ, R and the cost table lookup as engine/costs.py does it.
import assert from "node:assert/strict";
import { test } from "node:test";

import { phasesOf } from "../../static/js/model/phases.js";
import {
  acceptanceRate, ancestorMatrix, breakEvenTau, ancestorsOf, attentionMask, formulaNumbers, kvCache, leviathanTau, positionIds,
  predictedSpeedup, tableCost, verifiedTree, verifyCost, walkStep,
} from "../../static/js/model/theory.js";
import { arRun, endedRun, sampledRun, talonRun } from "./fixtures.mjs";
import { SERVED_POLICIES } from "./served.mjs";

test("mask_and_positions_match_engine_tree_doctests", () => {
  assert.deepEqual(ancestorMatrix([-1, 0, 0, 1]), [[1, 0, 0, 0], [1, 1, 0, 0], [1, 0, 1, 0], [1, 1, 0, 1]]);
  assert.deepEqual(attentionMask([-1, 0, 0], 2), [[1, 1, 1, 0, 0], [1, 1, 1, 1, 0], [1, 1, 1, 0, 1]]);
  assert.deepEqual(positionIds([0, 1, 1, 2], 10), [10, 11, 11, 12]);
  assert.deepEqual(ancestorsOf([-1, 0, 0, 1], 3), [3, 1, 0]);
});

test("the_verified_tree_comes_from_the_tree_event_and_plain_decoding_is_the_root_alone", () => {
  const verify = phasesOf(talonRun).find((p) => p.name === "verify");
  assert.deepEqual(verifiedTree(talonRun, verify), { parent: [-1, 0, 0, 1, 2], depth: [0, 1, 1, 2, 2], text: ["x", "a", " b", "d", "f"] });
  assert.deepEqual(verifiedTree(arRun, phasesOf(arRun)[0]).parent, [-1]);
});

test("the_cache_keeps_the_prefix_the_root_and_the_accepted_path", () => {
  const commit = phasesOf(talonRun).find((p) => p.name === "commit");
  const cache = kvCache(talonRun, commit, 9);
  assert.deepEqual(cache.rows.map((r) => r.fate), ["kept", "kept", "dropped", "dropped", "dropped"]);
  assert.deepEqual([cache.kept, cache.dropped, cache.after], [2, 3, 11]);
});

test("the_walk_gives_p_q_u_ratio_and_the_residual_draw_of_each_visited_node", () => {
  const verify = sampledRun.find((e) => e.type === "verify");
  const first = walkStep(verify, 1);
  assert.equal(first.node, 0);
  assert.deepEqual(first.checks.map((c) => [c.u, c.ratio, c.accepted]), [[0.3, 1, true]]);
  assert.equal(first.emitted, null);
  const last = walkStep(verify, 2);
  assert.equal(last.node, 1);
  assert.deepEqual(last.checks.map((c) => [c.u, c.accepted]), [[0.9, false]]);
  assert.deepEqual(last.residual.map((t) => t.text), ["w", "y"]);
  assert.equal(last.emitted.text, "w");
  assert.equal(last.drawn, 203);
});

test("a_walk_that_ends_the_text_stops_at_its_last_accepted_draft_and_draws_nothing", () => {
  const verify = endedRun.find((e) => e.type === "verify");
  const before = walkStep(verify, 2);
  assert.deepEqual([before.node, before.ended, before.emitted], [1, false, null]);
  const end = walkStep(verify, 3);
  assert.deepEqual([end.node, end.checks, end.residual, end.drawn, end.emitted, end.ended], [3, [], null, null, null, true]);
  const cache = kvCache(endedRun, phasesOf(endedRun).find((p) => p.name === "commit"), 9);
  assert.deepEqual(cache.rows.map((r) => r.fate), ["kept", "kept", "dropped", "kept", "dropped"]);
  assert.equal(acceptanceRate(endedRun), 1, "2 accepted, and no rejection ends the walk");
});

test("a_version_1_walk_falls_back_to_the_tried_children_of_the_visited_node", () => {
  const verify = structuredClone(talonRun.find((e) => e.type === "verify"));
  delete verify.walk;
  const atRoot = walkStep(verify, 1, [-1, 0, 0, 1, 2]);
  assert.deepEqual(atRoot.checks.map((c) => [c.child, c.accepted]), [[1, true], [2, false]]);
  assert.ok(atRoot.partial);
  assert.deepEqual(walkStep(verify, 2, [-1, 0, 0, 1, 2]).checks.map((c) => c.child), [3]);
});

test("alpha_counts_accepted_over_tried_positions_and_leviathan_follows", () => {
  assert.equal(acceptanceRate(talonRun), 2 / 3, "step 1: 1 accepted then a rejection; step 2: 1 accepted to a leaf");
  assert.equal(acceptanceRate(arRun), null, "nothing drafted");
  assert.ok(Math.abs(leviathanTau(0.8, 4) - 3.3616) < 1e-12);
  assert.equal(leviathanTau(1, 4), 5);
  assert.equal(predictedSpeedup(3, 0.05, 4), 2.5);
  assert.equal(predictedSpeedup(3, 0.05, 4, 2), 3 / 2.2, "a tree that costs two one-token forwards");
});

test("a_tree_pays_exactly_when_tau_beats_its_verify_cost_plus_its_drafting", () => {
  assert.ok(Math.abs(breakEvenTau(2.8, 0.03, 4) - 2.92) < 1e-12);
  assert.equal(breakEvenTau(1, 0.05, 0), 1, "nothing drafted: the verify alone");
  assert.equal(breakEvenTau(2, null, 3), null, "no c yet");
  for (const tau of [2.9, 2.95]) {  // R > 1 on the same side of the line
    assert.equal(predictedSpeedup(tau, 0.03, 4, 2.8) > 1, tau > breakEvenTau(2.8, 0.03, 4));
  }
});

test("the_run_s_cost_summary_is_read_as_engine_costs_reads_its_table", () => {
  const costs = { source: "measured", context: 128, ns: [1, 2, 4], target_ms: [10, 12, 20], draft_ms: [1, 1, 2] };
  assert.equal(tableCost(costs, 3), 20, "the engine's time for 4 tokens prices 3, as the engine reads it");
  assert.equal(tableCost(costs, 2), 12, "a listed n is read as listed");
  assert.equal(tableCost(costs, 6), null, "past the listed sizes the page invents nothing");
  assert.deepEqual(verifyCost({ costs, treeTokens: 4 }), { ratio: 2, source: "cost table (measured)" });
  assert.deepEqual(verifyCost({ costs, treeTokens: 6, stepVerifyMs: 30, arVerifyMs: 10 }), { ratio: 3, source: "measured" },
                   "a tree larger than the table lists: the run's own timings");
  assert.deepEqual(verifyCost({ treeTokens: 61, stepVerifyMs: 30, arVerifyMs: 10 }), { ratio: 3, source: "measured" });
  assert.equal(verifyCost({ treeTokens: 61 }), null);
});

test("formula_numbers_use_the_run_so_far_and_plain_decoding_for_the_measured_speedup", () => {
  const phases = phasesOf(talonRun);
  const first = formulaNumbers(talonRun, phases[5], { arEvents: arRun });
  assert.equal(first.tau, 2);
  assert.equal(first.alpha, 0.5);
  assert.equal(first.measured, null, "the run has not finished");
  assert.deepEqual(first.stepVerifyCost, { ratio: 2, source: "measured" }, "10 ms over ar's 5 ms");
  const end = formulaNumbers(talonRun, phases[phases.length - 1], { arEvents: arRun, arFinished: arRun[arRun.length - 1] });
  assert.equal(end.measured, 0.5);
  assert.equal(end.predicted, 2 / (1 + 0.2 * 1.5));
  assert.equal(end.breakEven, breakEvenTau(end.runVerifyCost.ratio, end.c, end.delta), "the run's trees' cost, its drafting");
  const chain = formulaNumbers(sampledRun, phasesOf(sampledRun).at(-1), { policies: SERVED_POLICIES });
  assert.equal(chain.gamma, 2);
  assert.equal(chain.leviathan, leviathanTau(0.5, 2));
  const picked = structuredClone(sampledRun);  // a chain that picks γ each step says so as it moves it
  const at = picked.findIndex((e) => e.type === "step_metrics");
  picked.splice(at + 1, 0, { type: "policy_adjusted", run_id: picked[0].run_id, step: picked[at].step, param: "gamma",
                             old: 2, new: 1, why: "α ≈ 0.40" });
  const moved = formulaNumbers(picked, phasesOf(picked).at(-1), { policies: SERVED_POLICIES });
  assert.equal(moved.gamma, 1);
  assert.equal(moved.leviathan, leviathanTau(moved.alpha, 1));
  const withTable = structuredClone(talonRun);
  withTable[0].costs = { source: "synthetic", context: 128, ns: [1, 8, 64], target_ms: [40, 50, 120], draft_ms: [4, 5, 12] };
  const priced = formulaNumbers(withTable, phases[5], { arEvents: arRun });
  assert.equal(priced.stepVerifyCost.source, "cost table (synthetic)", "the run's own table wins over timings");
  assert.equal(priced.stepVerifyCost.ratio, 50 / 40, "5 tokens read at the engine's 8");
});
