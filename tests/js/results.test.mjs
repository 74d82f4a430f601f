// results.json -> the /results page's series, and the axes' ticks.
import assert from "node:assert/strict";
import { test } from "node:test";

import {
  batchSweepSeries, acceptLengthSeries, acceptanceByDepthSeries, categoryHeads, categoryRows, checkReport, coloursOf, costSeries,
  describeReport, intervalText, memoryReading, reportVersion, resultsCsv, speedupSeries, summaryRows, tauByCategorySeries, tauVsSizeSeries,
  timeSplitSeries, withBaseline,
} from "../../static/js/model/results.js";
import { linear, log2, log2Ticks, niceMax, niceTicks } from "../../static/js/model/scale.js";

const REPORT = {
  baseline: "ar",
  target: "t", drafter: "hybrid", device: "cpu", dtype: "bfloat16", prompts: 2, max_new_tokens: 8, temperature: 0,
  categories: ["writing", "coding"],
  cost_curve: { source: "measured", ns: [1, 2, 4], contexts: [128, 512], ms: [[10, 11, 14], [12, 13, 18]],
                ratio: [[1, 1.1, 1.4], [1, 13 / 12, 1.5]] },
  results: [
    { policy: "ar", tau: 1, delta: 0, c: null, tokens_per_s: 20, speedup_vs_ar: 1, steps: 16, identical_to_ar: true,
      divergences: [], by_category: { writing: { tau: 1 }, coding: { tau: 1 } }, tree_sizes: [[0, 16, 16]] },
    { policy: "hf-generate", tau: null, delta: null, c: null, tokens_per_s: 21, speedup_vs_ar: 1.05, steps: null,
      identical_to_ar: true, divergences: [], by_category: { writing: { tau: null } }, tree_sizes: [] },
    { policy: "talon", tau: 2.5, delta: 4, c: 0.03, tokens_per_s: 30, speedup_vs_ar: 1.5, steps: 6,
      identical_to_ar: false, divergences: [{ question_id: 1, position: 3, top2_gap: 0.125 }],
      by_category: { writing: { tau: 3 }, coding: { tau: 2 } }, tree_sizes: [[10, 2, 6], [20, 4, 9]] },
  ],
};

test("a_report_without_results_or_ar_is_refused_with_a_reason", () => {
  assert.throws(() => checkReport([]), /not a JSON object/);
  assert.throws(() => checkReport({ results: [] }), /no "results" list/);
  assert.throws(() => checkReport(withBaseline({ results: [{ policy: "talon", tokens_per_s: 1 }] }, "ar")), /no ar result/);
  assert.equal(withBaseline({ ...REPORT, baseline: "own" }, "ar").baseline, "own", "a report's own baseline wins");
  assert.equal(checkReport(REPORT), REPORT);
});

test("series_match_the_bench_plots", () => {
  assert.deepEqual(speedupSeries(REPORT).map((b) => [b.label, b.value, b.baseline]),
                   [["ar", 1, false], ["hf-generate", 1.05, true], ["talon", 1.5, false]]);
  assert.deepEqual(tauByCategorySeries(REPORT), { categories: ["writing", "coding"],
                                                  series: [{ label: "talon", values: [3, 2] }] });
  assert.deepEqual(tauVsSizeSeries(REPORT), [{ label: "talon", points: [{ size: 10, steps: 2, tau: 3 },
                                                                          { size: 20, steps: 4, tau: 2.25 }] }]);
  assert.deepEqual(costSeries(REPORT).lines.map((l) => l.context), [128, 512]);
  assert.equal(costSeries({ ...REPORT, cost_curve: null }), null);
  const colours = coloursOf(REPORT.results, REPORT.baseline);
  assert.notEqual(colours.talon, colours["hf-generate"]);
});

test("summary_rows_spell_equality_out", () => {
  const rows = summaryRows(REPORT);
  assert.equal(rows[0].speedup, 1);
  assert.equal(rows[0].equality, "identical");
  assert.equal(rows[2].equality, "same up to bf16 near-ties on 1 prompt (top-2 gaps ≤ 0.125)");
  const far = summaryRows({ ...REPORT, results: [{ ...REPORT.results[2],
    divergences: [{ question_id: 1, position: 3, top2_gap: 2 }] }] });
  assert.equal(far[0].equality, "differs on 1 prompt (top-2 gaps up to 2.000, above the bf16 near-tie bound 0.5)");
});

test("a_speedups_interval_is_kept_in_its_row_and_its_two_ends_in_the_csv", () => {
  const report = { ...REPORT, results: REPORT.results.map((r, i) => ({ ...r, speedup_interval: i ? [1.2, 1.7] : null })) };
  const rows = summaryRows(report);
  assert.equal(rows[0].speedupInterval, null);
  assert.deepEqual(rows[1].speedupInterval, [1.2, 1.7]);
  assert.equal(summaryRows(REPORT)[1].speedupInterval, null);  // a report from before intervals
  assert.deepEqual(speedupSeries(report).map((b) => b.interval), [null, [1.2, 1.7], [1.2, 1.7]]);
  const lines = resultsCsv(report).trimEnd().split("\n");
  assert.ok(lines.includes(`${report.results[1].policy},run,,speedup_low,1.2`));
  assert.ok(lines.includes(`${report.results[1].policy},run,,speedup_high,1.7`));
  assert.ok(lines.includes("ar,run,,speedup_low,"));
  assert.equal(intervalText(REPORT), null);  // drew none
  assert.equal(intervalText({ ...report, interval: { level: 0.9, draws: 500 } }),
               "Speedup (low–high): where 90% of the speedups fall when the run's prompts are drawn again with " +
               "replacement (500 draws): how far these prompts pin the ratio down.");
});

test("ticks_are_round_and_scales_map_ends_to_ends", () => {
  assert.deepEqual(niceTicks(0, 1.32), [0, 0.5, 1, 1.5]);
  assert.deepEqual(niceTicks(0, 7), [0, 2, 4, 6, 8]);
  assert.equal(niceMax([3, 7]), 8);
  assert.equal(niceMax([]), 1);
  const y = linear(0, 10, 100, 0);
  assert.deepEqual([y(0), y(5), y(10)], [100, 50, 0]);
  const x = log2(1, 128, 0, 70);
  assert.deepEqual([x(1), x(2), x(128)], [0, 10, 70]);
});

test("category_rows_read_like_spec_bench", () => {
  const rows = categoryRows(REPORT);
  assert.deepEqual(rows[0].cells, [{ speedup: 1, tau: 1 }, { speedup: 1, tau: 1 }, { speedup: 1, tau: 1 }]);
  assert.deepEqual(rows[2].cells[2], { speedup: 1.5, tau: 2.5 });
  assert.deepEqual(rows[1].cells[1], null);
});

test("a_reports_note_is_said_with_it", () => {
  assert.match(describeReport({ ...REPORT, note: "under load" }), /temperature 0\. Note: under load$/);
  assert.doesNotMatch(describeReport(REPORT), /Note/);
});

test("the_memorys_readings_are_said_as_results_md_says_them", () => {
  // the same readings as tools/report_markdown.py's doctest, the same words
  assert.equal(memoryReading([35.6, 33.4]), "memory read at 35.6 → 33.4 GB/s");
  assert.equal(memoryReading([32.6, 47.7, 29.9, 43.6]), "memory read at 29.9–47.7 GB/s (median 38.1 of 4 readings)");
  assert.equal(memoryReading([30, 50, 40]), "memory read at 30.0–50.0 GB/s (median 40.0 of 3 readings)");
  assert.equal(memoryReading(undefined), null);
  assert.match(describeReport({ ...REPORT, memory_gb_s: [30, 50, 40] }),
               /temperature 0 · memory read at 30\.0–50\.0 GB\/s \(median 40\.0 of 3 readings\)$/);
  assert.doesNotMatch(describeReport(REPORT), /memory/);
});

test("a_log2_axis_over_every_n_labels_the_powers_of_two_and_the_last", () => {
  assert.deepEqual(log2Ticks(Array.from({ length: 64 }, (_, i) => i + 1)), [1, 2, 4, 8, 16, 32, 64]);
  assert.deepEqual(log2Ticks([1, 3, 5, 48]), [1, 48]);
});

// What a version-2 report adds per policy (tools/report.py): per-depth acceptance and tokens per step.
const STEP_SHAPES = {
  ar: { acceptance_by_depth: [], accept_lengths: [[1, 16]] },
  "hf-generate": { acceptance_by_depth: [], accept_lengths: [] },
  talon: { acceptance_by_depth: [{ depth: 1, drafted: 6, reached: 6, accepted: 5, rate: 5 / 6, conditional_rate: 5 / 6 },
                                 { depth: 2, drafted: 4, reached: 4, accepted: 1, rate: 0.25, conditional_rate: 0.25 }],
           accept_lengths: [[1, 1], [2, 4], [3, 1]] },
};
const V2 = { ...REPORT, report_version: 2,
             results: REPORT.results.map((r) => ({ ...r, ...STEP_SHAPES[r.policy],
                                                   share_draft: r.steps == null ? null : 0.25,
                                                   share_verify: r.steps == null ? null : 0.7,
                                                   share_other: r.steps == null ? null : 0.05 })) };

test("a_report_without_a_version_is_version_one_and_has_no_per_depth_acceptance", () => {
  assert.equal(reportVersion(REPORT), 1);
  assert.equal(reportVersion(V2), 2);
  assert.equal(acceptanceByDepthSeries(REPORT), null);
  assert.equal(acceptLengthSeries(REPORT), null);
});

test("per_depth_acceptance_keeps_both_rates_and_their_counts_for_drafting_policies", () => {
  const series = acceptanceByDepthSeries(V2);
  assert.deepEqual(series.map((s) => s.label), ["talon"]);  // not ar (no drafts), not hf-generate (no steps)
  assert.deepEqual(series[0].points[1], { depth: 2, rate: 0.25, conditional: 0.25, drafted: 4, reached: 4, accepted: 1 });
});

test("the_acceptance_length_histogram_gives_shares_of_steps_for_every_length_up_to_the_longest", () => {
  const { lengths, series } = acceptLengthSeries(V2);
  assert.deepEqual(lengths, [1, 2, 3]);
  assert.deepEqual(series, [{ label: "talon", total: 6, steps: [1, 4, 1], shares: [1 / 6, 4 / 6, 1 / 6] }]);
});

test("the_time_split_leaves_out_policies_that_keep_none", () => {
  assert.deepEqual(timeSplitSeries(V2).map((s) => [s.label, s.draft, s.verify, s.other]),
                   [["ar", 0.25, 0.7, 0.05], ["talon", 0.25, 0.7, 0.05]]);
});

test("category_heads_carry_each_categorys_sample_size", () => {
  const withPrompts = { ...V2, results: V2.results.map((r) => r.policy !== "ar" ? r : {
    ...r, by_category: { writing: { tau: 1, prompts: 3 }, coding: { tau: 1, prompts: 1 } } }) };
  assert.deepEqual(categoryHeads(withPrompts), [{ name: "writing", prompts: 3 }, { name: "coding", prompts: 1 }]);
  assert.deepEqual(categoryHeads(REPORT), [{ name: "writing", prompts: null }, { name: "coding", prompts: null }]);
});

test("the_csv_is_tidy_quotes_what_needs_it_and_holds_depths_and_tokens_per_step", () => {
  const report = { ...V2, results: [...V2.results, { ...V2.results[2], policy: 'talon:note="a,b"' }] };
  const lines = resultsCsv(report).trimEnd().split("\n");
  assert.equal(lines[0], "policy,scope,key,metric,value");
  assert.ok(lines.includes("talon,run,,tokens_per_s,30"));
  assert.ok(lines.includes("hf-generate,run,,tau,"));  // null stays empty
  assert.ok(lines.includes("talon,category,writing,tau,3"));
  assert.ok(lines.includes("talon,depth,2,conditional_rate,0.25"));
  assert.ok(lines.includes("talon,tokens_per_step,2,steps,4"));
  assert.ok(lines.includes('"talon:note=""a,b""",run,,steps,6'));
  assert.ok(lines.every((line) => !line.startsWith("ar,depth")));
});

test("a_batch_sweep_draws_each_drafting_policys_speedup_at_every_batch_and_one_batch_draws_none", () => {
  const point = (policy, batch, speedup) => ({ policy, batch, speedup_vs_ar: speedup, tokens_per_s: 1,
                                               tokens_per_s_per_request: 1, tau: 2, identical_to_ar: true });
  const report = { baseline: "ar", batch_sweep: [point("ar", 1, 1), point("cast", 4, 1.2), point("cast", 1, 1.4),
                                                 point("eagle", 1, 0.9), point("ar", 4, 1), point("eagle", 4, null)] };
  assert.deepEqual(batchSweepSeries(report), {
    batches: [1, 4],
    lines: [{ label: "cast", points: [{ batch: 1, speedup: 1.4 }, { batch: 4, speedup: 1.2 }] },
            { label: "eagle", points: [{ batch: 1, speedup: 0.9 }] }],
  });
  assert.equal(batchSweepSeries({ baseline: "ar", results: [] }), null);
});
