// Compare mode's pure parts: equality in words, the table's numbers, shared scales, lock-step alignment.
import assert from "node:assert/strict";
import { test } from "node:test";

import {
  alignByTokens, equality, firstDifference, gapAt, leaderIndex, nearTieBound, predictedSpeedup, runFacts,
  sharedScales, tableRows,
} from "../../static/js/model/compare.js";
import { PhasePlayer } from "../../static/js/player.js";
import { arRun, talonRun } from "./fixtures.mjs";

// ar's run of the same setup as talonRun, emitting the same four tokens one per step, with its walk's top-2.
function arOf(tokens, { gapAtToken = null, dtype = "bfloat16" } = {}) {
  const header = { schema_version: 2, run_id: "ar1", policy: "ar" };
  const events = [{ ...header, type: "run_started", prompt: "p", prompt_tokens: 10, params: {}, drafter: "none",
                    target: "t", draft: null, device: "cpu", dtype, seed: 0, temperature: 0, top_k: 0, top_p: 1,
                    max_new_tokens: tokens.length }];
  tokens.forEach((token, i) => {
    const p2 = i === gapAtToken ? 0.5 * Math.exp(-0.125) : 0.01;
    events.push(
      { ...header, type: "verify", step: i + 1, nodes: [], accepted_path: [0],
        emitted: { parent: 0, token, text: `t${token}`, p: 0.5, kind: "bonus" },
        walk: [{ node: 0, top: [{ token, text: "", p: 0.5, q: null }, { token: 999, text: "", p: p2, q: null }],
                 checks: [], residual_top: null, drawn: token }] },
      { ...header, type: "step_metrics", step: i + 1, accepted: 0, emitted: 1, tree_size: 0, depth: 0, width: 0,
        draft_forwards: 0, draft_ms: 0, draft_forward_ms: 0, verify_ms: 5, other_ms: 0, new_tokens: i + 1 });
  });
  events.push({ ...header, type: "run_finished", text: "", tokens, new_tokens: tokens.length, steps: tokens.length,
                tau: 1, delta: 0, c: null, tokens_per_s: 50, wall_s: 1, draft_ms: 0, draft_forward_ms: 0,
                verify_ms: 1, other_ms: 0, stop_reason: "max_new_tokens" });
  return events;
}

test("first_difference_finds_the_first_differing_position_or_a_length_cut", () => {
  assert.equal(firstDifference([1, 2, 3], [1, 2, 3]), null);
  assert.equal(firstDifference([1, 2, 3], [1, 5, 3]), 1);
  assert.equal(firstDifference([1, 2], [1, 2, 3]), 2);
});

test("gap_at_reads_log_p1_minus_log_p2_from_the_walk_of_the_step_that_emitted_the_position", () => {
  // talonRun: step 1 emits tokens 0 ("a", chosen at node 0) and 1 ("g", at node 1); step 2 emits 2 and 3.
  assert.ok(Math.abs(gapAt(talonRun, 0) - Math.log(0.7 / 0.1)) < 1e-12);
  assert.ok(Math.abs(gapAt(talonRun, 1) - Math.log(0.6 / 0.2)) < 1e-12);
  assert.equal(gapAt(talonRun, 3), null, "a walk node with one top token gives no gap");
  assert.equal(gapAt(arRun, 0), null, "schema-1 events carry no walk");
});

test("equality_says_identical_near_tie_or_differs_in_words", () => {
  const talon = runFacts(talonRun);
  assert.equal(equality(talon, runFacts(arOf([97, 103, 104, 105]))).text, "identical");

  const tie = runFacts(arOf([97, 103, 104, 777], { gapAtToken: 3 }));
  const talonBf16 = runFacts(talonRun.map((e) => (e.type === "run_started" ? { ...e, dtype: "bfloat16" } : e)));
  const said = equality(talonBf16, tie);
  // talon's own walk has no second token at position 3, so ar's walk gives the gap there.
  assert.equal(said.kind, "near-tie");
  assert.equal(said.text, "same up to a bf16 near-tie at token 4 (top-2 gap 0.125)");

  const far = equality(talon, runFacts(arOf([97, 55, 104, 105])));
  assert.equal(far.kind, "differs");
  assert.match(far.text, /^differs at token 2 \(top-2 gap 1\.099, above the fp32 near-tie bound 0\.001\)$/);

  const ar = runFacts(arOf([1]));
  assert.equal(equality(ar, ar).kind, "baseline");
  const sampled = runFacts(talonRun.map((e) => (e.type === "run_started" ? { ...e, temperature: 0.8 } : e)));
  assert.equal(equality(sampled, tie).kind, "sampled");
});

test("near_tie_bounds_follow_the_dtype", () => {
  assert.equal(nearTieBound("bfloat16"), 0.5);
  assert.equal(nearTieBound("torch.float16"), 0.0625);
  assert.equal(nearTieBound("float32"), 0.001);
  assert.equal(nearTieBound(undefined), 0.001);
});

test("predicted_speedup_is_tau_over_one_plus_c_delta", () => {
  assert.equal(predictedSpeedup(3, 5, 0.04), 2.5);
  assert.equal(predictedSpeedup(1, 0, null), 1);
  assert.equal(predictedSpeedup(2, 4, null), null);
});

test("table_rows_put_ar_first_at_one_and_explain_each_policy", () => {
  const rows = tableRows([runFacts(talonRun), runFacts(arOf([97, 103, 104, 105]))], { baseline: "ar" });
  assert.deepEqual(rows.map((r) => r.policy), ["ar", "talon"]);
  const [ar, talon] = rows;
  assert.equal(ar.speedup, 1);
  assert.equal(ar.predictedR, 1);
  assert.equal(ar.equality.kind, "baseline");
  assert.equal(talon.speedup, 2); // 100 tokens/s over 50
  assert.equal(talon.meanTreeSize, 2.5); // trees of 4 and 1 drafted nodes
  assert.equal(talon.acceptance, 2 / 5); // 1 + 1 accepted of 5 drafted
  assert.ok(Math.abs(talon.predictedR - 2 / (1 + 0.2 * 1.5)) < 1e-12);
  // From the run's own times over ar's step of 5 ms: verify(n) 8 ms, c = (4 / 3 ms per draft forward) / 5,
  // δ 1.5, and 2 ms a step outside the forwards (drafting's own work 1, the rest 1).
  assert.equal(ar.costAwareR, 1);
  assert.ok(Math.abs(talon.costAwareR - 2 / (8 / 5 + 1.5 * (4 / 3) / 5 + 2 / 5)) < 1e-12);
  assert.equal(talon.equality.text, "identical");
});

test("shared_scales_take_the_largest_of_every_pane", () => {
  const facts = [runFacts(talonRun), runFacts(arOf([1, 2, 3, 4, 5]))];
  assert.deepEqual(sharedScales(facts), { steps: 5, depth: 2, width: 2, size: 4 });
  assert.equal(leaderIndex(facts), 1);
  assert.deepEqual(facts[0].steps[0].layers, [2, 2]);
});

test("align_by_tokens_shows_the_step_that_emitted_the_same_output_position", () => {
  const ar = new PhasePlayer();
  ar.load(arOf([97, 103, 104, 105]));
  const talon = new PhasePlayer();
  talon.load(talonRun);
  // ar's step 3 (index 2) starts at token 2, which talon's second step emitted.
  assert.equal(alignByTokens({ stepIndex: 2, name: "verify", layer: null, walked: 0 }, ar, talon).stepIndex, 1);
  assert.equal(alignByTokens({ stepIndex: 1, name: "verify", layer: null, walked: 0 }, ar, talon).stepIndex, 0);
});
