// What-if: one step of the run on screen re-drafted and re-verified from the same prefix under another
// policy or parameters (engine/whatif.py, docs/websocket.md `what_if`), and its numbers beside the run's. No DOM.

import { foldEvents } from "./events.js";

/** What starts fresh in a what-if, as at any run's start: said once, under the control. */
export const FRESH_STATE_NOTE = "The step is re-drafted and re-verified from the same prefix as a run of its own; " +
  "the run on screen is not touched. As at any run's start, what a drafter learned during the run (the suffix " +
  "drafter's trust in its matches) and an adaptive policy's state (talon-adaptive, cast) start fresh.";

/** The tokens a run emitted before `step` (as the events number steps), from its text events. */
export function prefixBefore(events, step) {
  return events.filter((e) => e.type === "text" && e.step < step).flatMap((e) => e.tokens);
}

/**
 * The `what_if` message for `step` of the run in `events`: the run's own prompt, sampling, seed and length,
 * with the policy and parameters to try. The run's drafter is named where it had one that this server loaded
 * (`drafters`, from /api/info; null: any); otherwise the server's default drafts (whatIfAvailability says so).
 */
export function whatIfMessage(events, step, { policy, params = {} }, drafters = null) {
  const started = events.find((e) => e.type === "run_started");
  const message = {
    type: "what_if", step, prefix: prefixBefore(events, step), prompt: started.prompt, policy, params,
    temperature: started.temperature, top_k: started.top_k, top_p: started.top_p, seed: started.seed,
    max_new_tokens: started.max_new_tokens,
  };
  if (hasDrafter(started) && (drafters == null || drafters.includes(started.drafter))) message.drafter = started.drafter;
  return message;
}

/**
 * Whether the what-if control can re-run `step` of the run in `events` on this server (`info`: /api/info),
 * and if not why, in words for the control: { ok, reason, note }.
 */
export function whatIfAvailability(info, events, step) {
  if (info?.replay_only) {
    return { ok: false, reason: "What-if needs the model: this server replays recorded traces only (no model loaded)." };
  }
  const started = events.find((e) => e.type === "run_started");
  if (!started) {
    return { ok: false, reason: "Run a prompt (or replay a recorded run) first: what-if re-runs one of its steps." };
  }
  if (started.what_if_step != null) return { ok: false, reason: "This is a what-if already." };
  if (step == null || !events.some((e) => e.type === "draft_layer" || e.type === "tree" || e.type === "step_metrics")) {
    return { ok: false, reason: "Wait for the run's first step: what-if re-runs the step on screen." };
  }
  if (info?.target && started.target !== info.target) {
    return { ok: false, reason: `This run's target was ${started.target}; this server runs ${info.target}, ` +
                                "whose step from the same prefix would be another model's." };
  }
  const notes = [started.temperature > 0
    ? "The run samples (T > 0): the what-if draws afresh, so even the run's own policy may draft and accept otherwise."
    : "Greedy: with the run's own policy and parameters, the step comes out as it did in the run."];
  if (info?.dtype && started.dtype && started.dtype !== info.dtype) {
    notes.push(`The run was in ${started.dtype}, this server runs ${info.dtype}: near-ties may fall the other way.`);
  }
  if (hasDrafter(started) && info?.drafters && !info.drafters.includes(started.drafter)) {
    notes.push(`This server has no ${started.drafter} drafter: its default, ${info.default_drafter}, drafts instead.`);
  }
  return { ok: true, reason: "", note: notes.join(" ") };
}

function hasDrafter(started) {
  return Boolean(started.drafter) && started.drafter !== "none";
}

/** The step numbered `step` of a run folded from `events` (model/events.js), or null. */
export function foldedStep(events, step) {
  return foldEvents(events).steps.find((s) => s.step === step) ?? null;
}

/**
 * One step's numbers, as the comparison shows them: the tree verified, what was pruned and why, the target's
 * verdicts, and τ of the step (the tokens it emitted).
 *
 * Example: talonRun's step 1 (tests/js/fixtures.mjs): 4 kept, 2 pruned (1 budget, 1 below_threshold),
 * 1 accepted, 2 rejected, 1 unreached, emitted "g" (recovered), τ 2.
 */
export function stepSummary(step) {
  const nodes = [...step.nodes.values()].filter((n) => n.status !== "root" && n.id !== "emitted");
  const pruned = nodes.filter((n) => n.status === "pruned");
  const reasons = {};
  for (const node of pruned) reasons[node.reason] = (reasons[node.reason] ?? 0) + 1;
  const verdicts = { accepted: 0, rejected: 0, unreached: 0 };
  for (const node of nodes) if (node.verdict in verdicts) verdicts[node.verdict] += 1;
  const metrics = step.metrics;
  return {
    kept: metrics?.tree_size ?? nodes.length - pruned.length,
    pruned: pruned.length,
    reasons,
    depth: metrics?.depth ?? null,
    draftForwards: metrics?.draft_forwards ?? null,
    thresholds: step.layers.map((layer) => layer.threshold),
    verdicts,
    emitted: step.emitted ? { kind: step.emitted.kind, text: step.emitted.text } : null,
    accepted: metrics?.accepted ?? null,
    tau: metrics?.emitted ?? null,
    tokens: step.text?.text ?? null,
  };
}

/** The comparison's rows: [label, the run's value, the what-if's value, key], values as numbers or words. */
export function comparisonRows(original, whatIf) {
  const rows = [
    ["draft nodes kept (verified)", "kept"],
    ["candidates pruned", "pruned"],
    ["tree depth", "depth"],
    ["draft forwards", "draftForwards"],
    ["accepted by the target", "accepted"],
    ["τ of the step (tokens emitted)", "tau"],
  ].map(([label, key]) => [label, original?.[key] ?? null, whatIf?.[key] ?? null, key]);
  rows.push(["rejected / unreached", verdictPair(original), verdictPair(whatIf), "verdicts"]);
  rows.push(["the target's own token", emittedText(original), emittedText(whatIf), "emitted"]);
  return rows;
}

function verdictPair(summary) {
  return summary ? `${summary.verdicts.rejected} / ${summary.verdicts.unreached}` : null;
}

function emittedText(summary) {
  if (!summary) return null;
  return summary.emitted ? `${summary.emitted.kind} ${JSON.stringify(summary.emitted.text)}` : "none (the text ended)";
}

/**
 * What the what-if changed, as a short title from both runs' run_started (parameters with their defaults filled
 * in): "talon · mu 0.5" names only the parameters that differ; another policy is named with all of its own.
 */
export function whatIfTitle(original, whatIf) {
  const same = original?.policy === whatIf.policy;
  const changed = Object.entries(whatIf.params ?? {}).filter(([name, value]) => !same || original.params?.[name] !== value);
  const words = changed.map(([name, value]) => `${name} ${value}`);
  return [whatIf.policy, ...(words.length || !same ? words : ["as the run"])].join(" · ");
}
