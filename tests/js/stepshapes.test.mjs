// Per-depth acceptance and tokens per step of runs on the page, counted as tools/report.py counts a bench's.
import assert from "node:assert/strict";
import { test } from "node:test";

import { paneLabels, runFacts } from "../../static/js/model/compare.js";
import { acceptLengthSeries, acceptanceByDepthSeries } from "../../static/js/model/results.js";
import { acceptLengths, acceptanceByDepth, stepShapeSeries } from "../../static/js/model/stepshapes.js";
import { arRun, talonRun } from "./fixtures.mjs";
import { eagleGreedy, talonGreedy } from "./recorded.mjs";
import { SERVED_POLICIES } from "./served.mjs";

// tools/report.py acceptance_by_depth's doctest: Counter({(2, 2): 1, (2, 1): 1, (2, 0): 2, (1, 1): 1}).
const DOCTEST_STEPS = [[2, 2], [2, 1], [2, 0], [2, 0], [1, 1]].map(([depth, accepted]) => ({ depth, accepted }));

test("per_depth_acceptance_gives_tools_report_doctest_numbers", () => {
  assert.deepEqual(acceptanceByDepth(DOCTEST_STEPS).map((d) => [d.depth, d.drafted, d.reached, d.accepted, d.rate,
                                                                 d.conditional_rate]),
                   [[1, 5, 5, 3, 0.6, 0.6], [2, 4, 2, 1, 0.25, 0.5]]);
});

test("a_depth_no_step_reached_has_no_conditional_rate_and_no_steps_no_depths", () => {
  // Both steps draft to depth 3 and reject at depth 1: nothing reaches depth 3 (accepted ≥ 2).
  const [, , third] = acceptanceByDepth([{ depth: 3, accepted: 0 }, { depth: 3, accepted: 0 }]);
  assert.deepEqual(third, { depth: 3, drafted: 2, reached: 0, accepted: 0, rate: 0, conditional_rate: null });
  assert.deepEqual(acceptanceByDepth([]), []);
});

test("tokens_per_step_count_emitted_tokens_by_length_as_tools_report_accept_lengths", () => {
  // tools/report.py accept_lengths' doctest: Counter({3: 2, 1: 5}) -> [(1, 5), (3, 2)].
  const steps = [3, 1, 1, 3, 1, 1, 1].map((emitted) => ({ emitted }));
  assert.deepEqual(acceptLengths(steps), [[1, 5], [3, 2]]);
});

test("the_series_leave_out_plain_decoding_by_its_presentation_and_by_its_run_having_no_drafter", () => {
  const talon = runFacts(talonRun);
  const ar = runFacts(arRun);
  const shown = (runs, policies) => stepShapeSeries(runs, policies).lengths.series.map((s) => s.label);
  assert.deepEqual(shown([ar, talon], SERVED_POLICIES), [talon.policy]);
  assert.deepEqual(shown([ar, talon], {}), [talon.policy], "a server that serves no presentations: its drafter says");
});

test("the_series_are_the_results_pages_series_of_the_same_counts_so_its_charts_draw_them", () => {
  const runs = [talonGreedy, eagleGreedy].map(runFacts);
  const { byDepth, lengths } = stepShapeSeries(runs, SERVED_POLICIES);
  const report = { baseline: null, results: runs.map((run) => ({
    policy: run.policy, steps: run.steps.length, acceptance_by_depth: acceptanceByDepth(run.steps),
    accept_lengths: acceptLengths(run.steps) })) };
  assert.deepEqual(byDepth, acceptanceByDepthSeries(report));
  assert.deepEqual(lengths, acceptLengthSeries(report));
  for (const [i, run] of runs.entries()) {
    assert.equal(lengths.series[i].total, run.steps.length);
    assert.equal(lengths.series[i].steps.reduce((sum, n, k) => sum + n * lengths.lengths[k], 0), run.finished.new_tokens,
                 "every emitted token counted once");
  }
});

test("a_labelled_run_is_named_by_its_label_and_panes_of_one_policy_by_their_number", () => {
  const talon = { ...runFacts(talonRun), label: "2: talon" };
  assert.deepEqual(stepShapeSeries([talon], SERVED_POLICIES).byDepth.map((s) => s.label), ["2: talon"]);
  assert.deepEqual(paneLabels(["talon", "chain", "talon"]), ["1: talon", "chain", "3: talon"]);
});
