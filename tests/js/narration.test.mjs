// Narration: each phase's caption says what happens, with the run's numbers, in the policy's terms.
import assert from "node:assert/strict";
import { test } from "node:test";

import { narrate, prefixLength, sig } from "../../static/js/model/narration.js";
import { foldPhase, phasesOf } from "../../static/js/model/phases.js";
import { arRun, candidate, endedRun, sampledRun, talonRun } from "./fixtures.mjs";

const captions = (events) => phasesOf(events).map((phase) => narrate(events, phase, foldPhase(events, phase)));

test("numbers_read_as_a_person_says_them", () => {
  assert.deepEqual([0.2143, 0.006343, 12.3, 0.03, 1234.5, 0].map((v) => sig(v)), ["0.21", "0.0063", "12", "0.03", "1235", "0"]);
});

test("talon_layers_name_the_gate_with_its_numbers_and_count_kept_and_pruned", () => {
  const [forced, gated] = captions(talonRun);
  assert.match(forced.text, /3 candidates after “x”\. Layer 1 is forced: TALON keeps the top-K = 10/);
  assert.match(forced.text, /2 kept, 1 not in the top K \(2 of 60 nodes used\)/);
  assert.equal(gated.title, "Step 1 · draft layer 2");
  assert.match(gated.text, /m₂ = 0\.5, so TALON keeps every candidate with a path score ≥ μ·m₂ = 0\.03 × 0\.5 = 0\.015/);
  assert.match(gated.text, /2 kept, 1 below the threshold \(4 of 60 nodes used\)/);
});

test("verify_says_one_forward_over_every_drafted_token_with_tree_attention", () => {
  const verify = captions(talonRun)[2];
  assert.match(verify.text, /all 4 drafted tokens and the root “x” in one forward pass/);
  assert.match(verify.text, /its own ancestors and itself/);
  assert.match(verify.text, /prefix \+ depth \(9 \+ d\)/, "10 prompt tokens: 9 in the cache before step 1");
});

test("the_greedy_walk_says_accepted_then_recovered_then_bonus", () => {
  const all = captions(talonRun);
  assert.match(all[3].text, /After the root “x” the target's own choice is “a” \(p = 0\.7\), which is drafted: accepted ✓\. Its 1 other drafted child is rejected ✗\./);
  assert.match(all[4].text, /After “a” the target prefers “g” \(p = 0\.6\), which no child offers: the drafted child is rejected ✗ and “g” is the recovered token ↺/);
  assert.match(all[9].text, /“h” ends its path: every drafted token on it was accepted, so the target's next token “i” \(p = 0\.5\) comes free as the bonus ★/);
});

test("commit_counts_the_cache_rows_kept_and_dropped", () => {
  const commit = captions(talonRun)[5];
  assert.match(commit.text, /keeps the root and the 1 accepted position and drops 3: 9 \+ 5 rows after verify, 11 after the commit/);
  assert.match(commit.text, /emits 2 tokens: 1 accepted \+ “g” recovered ↺/);
  assert.equal(prefixLength(talonRun, phasesOf(talonRun)[6]), 11, "step 2 starts after the 2 tokens of step 1");
  const last = captions(talonRun).at(-1);
  assert.match(last.text, /keeps the root and the 1 accepted position and drops 0: 11 \+ 2 rows after verify, 13 after/,
               "the last commit, which also folds run_finished, still finds its step's events");
});

test("a_step_that_ends_the_text_says_so_and_draws_no_recovered_or_bonus_token", () => {
  const all = captions(endedRun);
  const accept = all.filter((c) => c.title.includes("accept"));
  assert.equal(accept.length, 3, "the walk stops at the end of turn: root, “a”, “⟨end⟩”");
  assert.match(accept[1].text, /After “a” the target's own choice is “⟨end⟩” \(p = 0\.9\), which is drafted: accepted ✓\./);
  assert.match(accept[2].text, /The text ends at “⟨end⟩”: generation stops there, so nothing drafted after it is emitted/);
  const commit = all.at(-1);
  assert.match(commit.text, /keeps the root and the 2 accepted positions and drops 2/);
  assert.match(commit.text, /The step emits 2 accepted drafts; the text ends at “⟨end⟩”, so no recovered or bonus token follows\./);
  assert.doesNotMatch(all.map((c) => c.text).join(" "), /bonus ★|recovered ↺|accepted \+/);
});

test("a_sampled_walk_names_p_q_the_ratio_u_and_the_residual_draw", () => {
  const all = captions(sampledRun);
  const accept = all.filter((c) => c.title.includes("accept"));
  assert.match(accept[0].text, /At the root “r”, the drafted “u” has q = 0\.4 and p = 0\.5: min\(1, p\/q\) = 1; u = 0\.3 < 1 → accepted ✓/);
  assert.match(accept[1].text, /At “u”, the drafted “v” has q = 0\.6 and p = 0\.1: min\(1, p\/q\) = 0\.17; u = 0\.9 ≥ 0\.17 → rejected ✗; p becomes the residual/);
  assert.match(accept[1].text, /recovered token “w” ↺ is drawn from what is left of p \(target p 0\.3, 0\.5 in the residual\)/);
  assert.match(all[0].text, /Draft token 1 of γ = 2: after “r” the draft samples “u” from its distribution q/);
});

test("plain_decoding_reads_one_token_per_forward", () => {
  const [verify, accept, commit] = captions(arRun);
  assert.match(verify.text, /single token/);
  assert.match(accept.text, /target's choice after the root .* is “t1”/);
  assert.match(commit.text, /The cache grows by one row/);
});

test("a_step_that_drafts_nothing_says_why_while_the_policy_stands_down", () => {
  const cast = structuredClone(arRun).map((e) => ({ ...e, policy: "cast" }));
  const why = "at batch 4 and context 128, nodes accepted for sure would yield at best 1.79 tokens per t₁ of verify";
  const metrics = cast.findIndex((e) => e.type === "step_metrics" && e.step === 1);
  cast.splice(metrics, 0, { ...cast[metrics], type: "policy_adjusted", param: "speculates", old: 1, new: 0, why });
  const verifies = captions(cast).filter((c) => c.title.endsWith("verify"));
  assert.match(verifies[0].text, /Nothing was drafted\.$/, "before the move: nothing to explain yet");
  assert.ok(verifies[1].text.endsWith(`Nothing was drafted: CAST stands down since it moved speculates to 0 (${why}).`),
            verifies[1].text);
  cast.splice(metrics + 1, 0, { ...cast[metrics], param: "speculates", old: 0, new: 1, why: "trees again" });
  assert.match(captions(cast).filter((c) => c.title.endsWith("verify"))[1].text, /Nothing was drafted\.$/,
               "once moved back, no stand-down is claimed");
});

test("eagle_rerank_and_adaptive_moves_are_told_in_their_own_terms", () => {
  const eagle = structuredClone(talonRun).map((e) => ({ ...e, policy: "eagle" }));
  eagle[0].params = { depth: 2, top_k: 2, total: 2 };
  eagle[3].pruned = [candidate(0, 98, " b", 1, 0.3, false, 2, "rerank")];
  const rerank = captions(eagle).find((c) => c.title.endsWith("rerank"));
  assert.match(rerank.text, /Of the 5 drafted nodes EAGLE keeps the m = 2 with the best path scores and drops 1/);
  const adaptive = structuredClone(talonRun).map((e) => ({ ...e, policy: "talon-adaptive" }));
  adaptive.splice(7, 0, { ...adaptive[6], type: "policy_adjusted", step: 1, param: "mu", old: 0.03, new: 0.045,
                          why: "the target accepts most of the depth drafted" });
  const commit = captions(adaptive).find((c) => c.title === "Step 1 · commit");
  assert.match(commit.text, /TALON-adaptive moves mu 0\.03 → 0\.045: the target accepts most of the depth drafted\./);
  const later = structuredClone(adaptive);
  later.splice(9, 0, { ...later[8], depth: 2, threshold: 0.0405, anchor: 0.9, candidates: [candidate(1, 130, "k", 2, 0.9, true, 2, "threshold")] });
  const step2 = captions(later).find((c) => c.title === "Step 2 · draft layer 2");
  assert.match(step2.text, /μ·m₂ = 0\.045 × 0\.9 = 0\.041/, "the gate in force after the move");
});
