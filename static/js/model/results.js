// A `specscope bench` results.json -> what the /results page draws. The same series as tools/plots.py,
// so the page and `bench --plots` show the same charts. No DOM. `report.baseline` names the policy
// every speedup is over: the report's own, else the served one that drafts nothing (withBaseline).

import { SHORT_DTYPE, nearTieBound } from "./compare.js";

const HF_BASELINES = ["hf-generate", "hf-prompt-lookup"];

// Okabe–Ito, as tools/plots.py: told apart under the common colour-vision deficiencies.
export const PALETTE = ["#0072B2", "#E69F00", "#009E73", "#CC79A7", "#D55E00", "#56B4E9", "#882255", "#000000"];
export const BASELINE_GREY = "#8c8c8c";
export const AR_GREY = "#4d4d4d";

export function isBaseline(label) {
  return HF_BASELINES.includes(String(label).split(":")[0]);
}

/** The report with its baseline named: its own where it names one, else `baseline` (model/policies.js baselinePolicy). */
export function withBaseline(report, baseline) {
  return report && typeof report === "object" && !Array.isArray(report)
    ? { ...report, baseline: report.baseline ?? baseline } : report;
}

/** Checks that `data` is a bench report this page can draw; throws an Error saying what is missing. */
export function checkReport(data) {
  if (!data || typeof data !== "object" || Array.isArray(data)) throw new Error("not a JSON object");
  if (!Array.isArray(data.results) || !data.results.length) throw new Error("no \"results\" list: is this a specscope bench results.json?");
  for (const [i, r] of data.results.entries()) {
    if (typeof r.policy !== "string") throw new Error(`results[${i}] has no policy`);
    if (typeof r.tokens_per_s !== "number") throw new Error(`results[${i}] (${r.policy}) has no tokens_per_s`);
  }
  if (!data.results.some((r) => r.policy === data.baseline)) throw new Error(`no ${data.baseline} result: speedups need the baseline`);
  return data;
}

/** One colour per policy label, stable across charts: the baseline dark grey, Hugging Face grey, the rest in turn. */
export function coloursOf(results, baseline) {
  const colours = {};
  let drafting = 0;
  for (const { policy } of results) {
    if (policy === baseline) colours[policy] = AR_GREY;
    else if (isBaseline(policy)) colours[policy] = BASELINE_GREY;
    else colours[policy] = PALETTE[drafting++ % PALETTE.length];
  }
  return colours;
}

/** [{label, value, baseline}] in the report's order; ar reads 1.00 by definition. */
export function speedupSeries(report) {
  return report.results.map((r) => ({
    label: r.policy, value: r.policy === report.baseline ? 1 : r.speedup_vs_ar ?? null, baseline: isBaseline(r.policy),
    interval: r.speedup_interval ?? null, // [low, high] with the prompts drawn again (report.interval says how)
  }));
}

/** Categories and, per drafting policy, τ in each (null where a category had no steps). */
export function tauByCategorySeries(report) {
  const categories = report.categories ?? [];
  const series = report.results
    .filter((r) => r.tau != null && r.policy !== report.baseline)
    .map((r) => ({ label: r.policy, values: categories.map((c) => r.by_category?.[c]?.tau ?? null) }));
  return { categories, series };
}

/** Per drafting policy, one point per verified tree size: mean tokens emitted by its steps, and how many. */
export function tauVsSizeSeries(report) {
  return report.results
    .filter((r) => r.tau != null && r.policy !== report.baseline && r.tree_sizes?.length)
    .map((r) => ({ label: r.policy,
                   points: r.tree_sizes.map(([size, steps, emitted]) => ({ size, steps, tau: emitted / steps })) }));
}

/** n and, per measured context, time(n) / time(1); null where the run had no cost table. */
export function costSeries(report) {
  const curve = report.cost_curve;
  if (!curve) return null;
  return { ns: curve.ns, source: curve.source ?? "measured",
           lines: curve.contexts.map((context, i) => ({ context, ratio: curve.ratio[i] })) };
}

/** The run in one line: what, where, how much. */
export function describeReport(report) {
  const parts = [`target ${report.target}`, report.drafter ? `drafter ${report.drafter}` : null,
                 `${report.device} ${report.dtype}`, `${report.prompts} prompts × ${report.max_new_tokens} new tokens`,
                 `temperature ${report.temperature}`, memoryReading(report.memory_gb_s)];
  const line = parts.filter(Boolean).join(" · ");
  return report.note ? `${line}. Note: ${report.note}` : line;
}

/**
 * The memory's read speeds (the bench reads them before its runs and after each prompt's) in results.md's
 * words (tools/report_markdown.py's memory_reading): as they came for one or two, their range and median for
 * more; null for a report without them.
 *
 * memoryReading([32.6, 47.7, 29.9, 43.6]) === "memory read at 29.9–47.7 GB/s (median 38.1 of 4 readings)"
 */
export function memoryReading(speeds) {
  if (!speeds?.length) return null;
  const gb = (speed) => speed.toFixed(1);
  if (speeds.length <= 2) return `memory read at ${speeds.map(gb).join(" → ")} GB/s`;
  const sorted = [...speeds].sort((a, b) => a - b);
  const middle = sorted.length >> 1;
  const median = sorted.length % 2 ? sorted[middle] : (sorted[middle - 1] + sorted[middle]) / 2;
  return `memory read at ${gb(sorted[0])}–${gb(sorted.at(-1))} GB/s (median ${gb(median)} of ${speeds.length} readings)`;
}

/**
 * What a report's speedup intervals are, in results.md's words, from how the bench drew them (report.interval:
 * its level and draws); null for a report that drew none.
 */
export function intervalText(report) {
  const drawn = report.interval;
  if (!drawn) return null;
  return `Speedup (low–high): where ${Math.round(drawn.level * 100)}% of the speedups fall when the run's prompts ` +
         `are drawn again with replacement (${drawn.draws} draws): how far these prompts pin the ratio down.`;
}

/** Spec-Bench's table: per policy, speedup vs ar and τ in each category, then over the whole run. */
export function categoryRows(report) {
  const categories = report.categories ?? [];
  return report.results.map((r) => ({
    policy: r.policy,
    cells: [...categories.map((c) => r.by_category?.[c] ?? null),
            { speedup_vs_ar: r.policy === report.baseline ? 1 : r.speedup_vs_ar, tau: r.tau }].map((cell) => cell && ({
      speedup: r.policy === report.baseline ? 1 : cell.speedup_vs_ar ?? null, tau: cell.tau ?? null,
    })),
  }));
}

/** The summary table: one row per policy, with equality spelled out. */
export function summaryRows(report) {
  return report.results.map((r) => ({
    policy: r.policy, tau: r.tau, delta: r.delta, c: r.c, tokensPerS: r.tokens_per_s,
    speedup: r.policy === report.baseline ? 1 : r.speedup_vs_ar, steps: r.steps,
    // where 95% of the speedups fall with the prompts drawn again (tools/report.py's speedup_interval); null: none
    speedupInterval: r.speedup_interval ?? null,
    equality: equalityText(r, report.dtype),
  }));
}

function equalityText(result, dtype) {
  if (result.identical_to_ar == null) return "—";
  if (result.identical_to_ar) return "identical";
  const divergences = result.divergences ?? [];
  const where = `${divergences.length} prompt${divergences.length === 1 ? "" : "s"}`;
  const gaps = divergences.map((d) => d.top2_gap);
  if (!gaps.length || gaps.some((g) => g == null)) return `differs on ${where}`;
  const widest = Math.max(...gaps);
  const name = SHORT_DTYPE[dtype] ?? dtype;
  if (widest <= nearTieBound(dtype)) return `same up to ${name} near-ties on ${where} (top-2 gaps ≤ ${widest.toFixed(3)})`;
  return `differs on ${where} (top-2 gaps up to ${widest.toFixed(3)}, above the ${name} near-tie bound ${nearTieBound(dtype)})`;
}

/** The report's version (tools/report.py): 1 where it carries none, written before reports were versioned. */
export function reportVersion(report) {
  return report.report_version ?? 1;
}

/** Policies that take steps (not Hugging Face's baselines) and draft (not ar). */
function draftingResults(report) {
  return report.results.filter((r) => r.steps != null && r.policy !== report.baseline);
}

/**
 * Per drafting policy, per depth d: the share of steps drafting at d whose draft there the target accepted
 * (`rate`, unconditional) and the same share among steps that accepted every draft above d (`conditional`),
 * with the counts behind them. Null where the report predates per-depth acceptance (version 1).
 */
export function acceptanceByDepthSeries(report) {
  const drafting = draftingResults(report);
  if (drafting.some((r) => r.acceptance_by_depth == null)) return null;
  return drafting.filter((r) => r.acceptance_by_depth.length).map((r) => ({
    label: r.policy,
    points: r.acceptance_by_depth.map((d) => ({ depth: d.depth, rate: d.rate, conditional: d.conditional_rate,
                                                drafted: d.drafted, reached: d.reached, accepted: d.accepted })),
  }));
}

/**
 * The acceptance-length histogram: per drafting policy, the share of its steps that emitted k tokens, for
 * k = 1 … the most any step emitted. k counts the accepted drafts and the target's own token (recovered or
 * bonus), as τ does. Null where the report predates it (version 1).
 */
export function acceptLengthSeries(report) {
  const drafting = draftingResults(report);
  if (drafting.some((r) => r.accept_lengths == null)) return null;
  const shown = drafting.filter((r) => r.accept_lengths.length);
  const most = Math.max(1, ...shown.flatMap((r) => r.accept_lengths.map(([tokens]) => tokens)));
  const lengths = Array.from({ length: most }, (_, i) => i + 1);
  const series = shown.map((r) => {
    const steps = Object.fromEntries(r.accept_lengths);
    const total = r.accept_lengths.reduce((sum, [, n]) => sum + n, 0);
    return { label: r.policy, total, steps: lengths.map((k) => steps[k] ?? 0),
             shares: lengths.map((k) => (steps[k] ?? 0) / total) };
  });
  return { lengths, series };
}

/**
 * Speedup against batch size from `bench --batch B1,B2,…` (the report's batch_sweep): the batch sizes and,
 * per drafting policy, its speedup over ar at each size (ar at the same batch is 1 by definition); null
 * where the report ran one batch size.
 *
 * batchSweepSeries({ baseline: "A", batch_sweep: [{ policy: "A", batch: 1, speedup_vs_ar: 1 },
 *   { policy: "B", batch: 1, speedup_vs_ar: 1.4 }, { policy: "B", batch: 4, speedup_vs_ar: 1.2 }] })
 *   -> { batches: [1, 4], lines: [{ label: "B", points: [{ batch: 1, speedup: 1.4 }, { batch: 4, speedup: 1.2 }] }] }
 */
export function batchSweepSeries(report) {
  const sweep = report.batch_sweep;
  if (!sweep?.length) return null;
  const batches = [...new Set(sweep.map((p) => p.batch))].sort((a, b) => a - b);
  const labels = [...new Set(sweep.map((p) => p.policy))].filter((label) => label !== report.baseline);
  return { batches, lines: labels.map((label) => ({
    label,
    points: sweep.filter((p) => p.policy === label && p.speedup_vs_ar != null)
      .sort((a, b) => a.batch - b.batch).map((p) => ({ batch: p.batch, speedup: p.speedup_vs_ar })),
  })) };
}

/** Where each policy's step time went: draft, verify and other shares (Hugging Face's baselines keep none). */
export function timeSplitSeries(report) {
  return report.results.filter((r) => r.share_draft != null).map((r) => ({
    label: r.policy, draft: r.share_draft, verify: r.share_verify, other: r.share_other,
  }));
}

/** The category columns with their sample size (prompts in each, the same for every policy). */
export function categoryHeads(report) {
  const reference = report.results.find((r) => r.policy === report.baseline) ?? report.results[0];
  return (report.categories ?? []).map((name) => ({ name, prompts: reference.by_category?.[name]?.prompts ?? null }));
}

const RUN_METRICS = ["tokens_per_s", "speedup_vs_ar", "tau", "delta", "c", "new_tokens", "steps", "share_draft",
                     "share_verify", "share_other", "identical_to_ar"];
const INTERVAL_ENDS = ["speedup_low", "speedup_high"]; // speedup_interval's two ends, a row each
const CATEGORY_METRICS = ["prompts", "new_tokens", "wall_s", "tokens_per_s", "speedup_vs_ar", "tau"];
const DEPTH_METRICS = ["drafted", "reached", "accepted", "rate", "conditional_rate"];

/**
 * The report as one tidy CSV: a row per (policy, scope, key, metric). Scopes: `run` (the whole run),
 * `category` (key: its name), `depth` (key: d; per-depth acceptance) and `tokens_per_step` (key: k, the
 * bonus counted; metric `steps`). Empty values are what the report holds as null.
 */
export function resultsCsv(report) {
  const rows = [["policy", "scope", "key", "metric", "value"]];
  for (const r of report.results) {
    for (const metric of RUN_METRICS) rows.push([r.policy, "run", "", metric, r[metric]]);
    INTERVAL_ENDS.forEach((metric, end) => rows.push([r.policy, "run", "", metric, r.speedup_interval?.[end]]));
    for (const [name, cell] of Object.entries(r.by_category ?? {})) {
      for (const metric of CATEGORY_METRICS) rows.push([r.policy, "category", name, metric, cell[metric]]);
    }
    for (const d of r.acceptance_by_depth ?? []) {
      for (const metric of DEPTH_METRICS) rows.push([r.policy, "depth", d.depth, metric, d[metric]]);
    }
    for (const [tokens, steps] of r.accept_lengths ?? []) rows.push([r.policy, "tokens_per_step", tokens, "steps", steps]);
  }
  return rows.map((row) => row.map(csvField).join(",")).join("\n") + "\n";
}

function csvField(value) {
  const text = value == null ? "" : String(value);
  return /[",\n\r]/.test(text) ? `"${text.replaceAll('"', '""')}"` : text;
}
