// Per-depth acceptance and tokens per step of runs seen on the page (live or recorded), counted from their
// step_metrics exactly as tools/report.py counts a bench's steps for results.json (acceptance_by_depth,
// accept_lengths), and shaped as /results' series so compare mode draws them with /results' own charts.
// No DOM.

import { presentationOf } from "./policies.js";
import { acceptLengthSeries, acceptanceByDepthSeries } from "./results.js";

/**
 * Per depth d ≥ 1 over steps [{depth, accepted}] (a step's verified tree depth and its accepted drafts):
 * how many steps drafted at d (depth ≥ d), reached d (accepted ≥ d − 1) and accepted at d (accepted ≥ d),
 * with rate = accepted / drafted and conditional_rate = accepted / reached (null where none reached d).
 * tools/report.py acceptance_by_depth, with its doctest:
 *
 * acceptanceByDepth([(2,2), (2,1), (2,0), (2,0), (1,1)] as {depth, accepted})
 *   -> [{depth 1, drafted 5, reached 5, accepted 3, rate 0.6, conditional 0.6},
 *       {depth 2, drafted 4, reached 2, accepted 1, rate 0.25, conditional 0.5}]
 */
export function acceptanceByDepth(steps) {
  const deepest = Math.max(0, ...steps.map((s) => s.depth));
  const count = (keep) => steps.filter(keep).length;
  return Array.from({ length: deepest }, (_, i) => {
    const d = i + 1;
    const drafted = count((s) => s.depth >= d);
    const reached = count((s) => s.depth >= d && s.accepted >= d - 1);
    const accepted = count((s) => s.accepted >= d);
    return { depth: d, drafted, reached, accepted, rate: accepted / drafted,
             conditional_rate: reached ? accepted / reached : null };
  });
}

/**
 * [tokens emitted in a step, steps] by tokens, over steps [{emitted}]: the accepted drafts and the target's
 * own token (recovered or bonus) counted together, as τ counts them; a step whose text ended at an accepted
 * draft has no own token (the engine's `emitted` says so). tools/report.py accept_lengths.
 */
export function acceptLengths(steps) {
  const counts = new Map();
  for (const { emitted } of steps) counts.set(emitted, (counts.get(emitted) ?? 0) + 1);
  return [...counts].sort(([a], [b]) => a - b);
}

/** Whether a run drafts: plain decoding is told by its presentation or by its run having no drafter. */
function drafts(run, policies) {
  return presentationOf(policies, run.policy).drafts && run.started?.drafter !== "none";
}

/**
 * The charts' series for runs [{label?, policy, started, steps}] (model/compare.js runFacts, `label` naming
 * each in the legend, else its policy), served `policies` telling the baseline apart: runs that draft and have
 * steps, as /results' acceptanceByDepthSeries and acceptLengthSeries give them (`byDepth`, `lengths`).
 */
export function stepShapeSeries(runs, policies) {
  const results = runs.filter((run) => drafts(run, policies) && run.steps.length).map((run) => ({
    policy: run.label ?? run.policy, steps: run.steps.length,
    acceptance_by_depth: acceptanceByDepth(run.steps), accept_lengths: acceptLengths(run.steps),
  }));
  const report = { baseline: null, results };
  return { byDepth: acceptanceByDepthSeries(report), lengths: acceptLengthSeries(report) };
}
