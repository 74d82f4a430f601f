// The caption of a phase: what it does, in plain words, with the run's own numbers, in each
// policy's terms (talon's gate μ·m_d, eagle's top-K and rerank to m, cast's utility per cost against
// C1/C2/C3, chain's γ, talon-adaptive's moves). No DOM: returns { title, text }.

import { stepEvent, walkNodes } from "./phases.js";
import { tokenLabel } from "./format.js";

const SUBSCRIPT = "₀₁₂₃₄₅₆₇₈₉";
const sub = (n) => String(n).replace(/\d/g, (d) => SUBSCRIPT[d]);

/** A number with two significant digits, as a person would say it: 0.21, 0.0063, 12. */
export function sig(value, digits = 2) {
  if (value == null || Number.isNaN(value)) return "–";
  if (value === 0) return "0";
  if (!Number.isFinite(value)) return "∞";
  if (Math.abs(value) >= 100) return String(Math.round(value));
  return String(Number(value.toPrecision(digits)));
}

/** A token in a sentence: “␣the”. */
export function quote(text) {
  return `“${tokenLabel(text ?? "")}”`;
}

const plural = (n, one, many = `${one}s`) => `${n} ${n === 1 ? one : many}`;

const POLICY_NAMES = { ar: "plain decoding", chain: "the chain", eagle: "EAGLE", talon: "TALON", cast: "CAST",
                       "talon-adaptive": "TALON-adaptive" };

/**
 * The caption for `phase` of a run's events. `state` is foldPhase's result for that phase (the
 * step as it stands, verdicts hidden where the walk has not been).
 */
export function narrate(events, phase, state) {
  if (!phase || !state?.step) return { title: "", text: "Choose a trace or run a prompt: each step then plays phase by phase." };
  const started = events.find((e) => e.type === "run_started") ?? {};
  const context = { started, policy: started.policy ?? events[0]?.policy, params: started.params ?? {},
                    temperature: started.temperature ?? 0, phase, step: state.step, events,
                    prefix: prefixLength(events, phase) };
  const say = SAY[phase.name];
  return say ? say(context) : { title: phase.name, text: "" };
}

/** Tokens in the target's cache when the step's verify runs: the prompt but its last token, plus every token emitted before. */
export function prefixLength(events, phase) {
  const started = events.find((e) => e.type === "run_started");
  let emitted = 0;
  for (const event of events) {
    if (event.type === "step_metrics" && event.step !== phase.step) emitted = event.new_tokens;
    if (event.step === phase.step) break;
  }
  return (started?.prompt_tokens ?? 1) - 1 + emitted;
}

const SAY = {
  draft(context) {
    const layer = stepEvent(context.events, context.phase, "draft_layer");
    const say = DRAFT[context.policy] ?? DRAFT.generic;
    return { title: `Step ${context.phase.stepIndex + 1} · draft layer ${context.phase.layer}`, text: say(context, layer) };
  },
  rerank(context) {
    const tree = stepEvent(context.events, context.phase, "tree");
    const say = RERANK[context.policy] ?? RERANK.generic;
    return { title: `Step ${context.phase.stepIndex + 1} · rerank`, text: say(context, tree) };
  },
  verify(context) {
    return { title: `Step ${context.phase.stepIndex + 1} · verify`, text: verifyText(context) };
  },
  accept(context) {
    const { phase } = context;
    return { title: `Step ${phase.stepIndex + 1} · accept · node ${phase.walked} of ${phase.walkLength}`, text: acceptText(context) };
  },
  commit(context) {
    return { title: `Step ${context.phase.stepIndex + 1} · commit`, text: commitText(context) };
  },
};

// ---------------------------------------------------------------- draft

function layerCounts(layer) {
  const counts = { total: layer.candidates.length, kept: 0, grown: 0, reasons: {} };
  for (const c of layer.candidates) {
    if (c.kept) counts.kept += 1;
    if (c.expanded) counts.grown += 1;
    if (!c.kept) counts.reasons[c.reason] = (counts.reasons[c.reason] ?? 0) + 1;
  }
  return counts;
}

function treeSize(step) {
  let size = 0;
  for (const node of step.nodes.values()) if (node.status !== "root" && node.status !== "pruned" && node.id !== "emitted") size += 1;
  return size;
}

function parentsOf(layer) {
  return new Set(layer.candidates.map((c) => c.parent)).size;
}

// The root named as the tree draws it: its token, or, before any token is known (step 1 of plain
// decoding), the prompt's last, in parentheses (so a sentence that brackets the root must not add its own).
function rootText(context) {
  const root = context.step.nodes.get("n0");
  return root?.token == null ? "(the prompt's last token)" : quote(root.shown ?? root.text);
}

/** A parameter as it stands at this phase: the run's setting, or the last value an adaptive policy moved it to. */
function paramNow(context, name) {
  let value = context.params[name];
  for (const event of context.events.slice(0, context.phase.end)) {
    if (event.type === "policy_adjusted" && event.param === name) value = event.new;
  }
  return value;
}

const DRAFT = {
  talon(context, layer) {
    const params = { ...context.params, mu: paramNow(context, "mu"), budget: paramNow(context, "budget") };
    const d = layer.depth;
    const counts = layerCounts(layer);
    const used = `(${treeSize(context.step)} of ${params.budget ?? "N"} nodes used)`;
    if (layer.threshold == null) {
      const left = counts.total - counts.kept;
      return `${plural(counts.total, "candidate")} after ${rootText(context)}. Layer ${d} is forced: ` +
        `${POLICY_NAMES[context.policy]} keeps the top-K = ${params.top_k ?? "K"} by path score outright. ` +
        `${counts.kept} kept${left ? `, ${left} not in the top K` : ""} ${used}.`;
    }
    const mu = params.mu ?? layer.threshold / layer.anchor;
    const pruned = [
      counts.reasons.below_threshold ? `${counts.reasons.below_threshold} below the threshold` : null,
      counts.reasons.budget ? `${counts.reasons.budget} past the budget` : null,
    ].filter(Boolean);
    const kept = counts.kept ? `${counts.kept} kept` : "none kept, so the tree stops growing here";
    return `${plural(counts.total, "candidate")} from ${plural(parentsOf(layer), "parent")}. The best path score here is ` +
      `m${sub(d)} = ${sig(layer.anchor)}, so ${POLICY_NAMES[context.policy]} keeps every candidate with a path score ≥ ` +
      `μ·m${sub(d)} = ${sig(mu)} × ${sig(layer.anchor)} = ${sig(layer.threshold)}: ${[kept, ...pruned].join(", ")} ${used}.`;
  },
  eagle(context, layer) {
    const { params } = context;
    const counts = layerCounts(layer);
    const k = params.top_k ?? 10;
    if (counts.grown === 0) {
      return `Layer ${layer.depth} is the last (depth D = ${params.depth ?? layer.depth}): its ${plural(counts.total, "candidate")} ` +
        `join the pool for the rerank without being grown. The pool now holds ${treeSize(context.step)} drafted nodes.`;
    }
    const from = layer.depth === 1 ? `children of the root ${rootText(context)}`
      : `the top-K = ${k} children of each of the ${plural(parentsOf(layer), "frontier node")}`;
    return `${plural(counts.total, "candidate")}: ${from}. EAGLE keeps every one in the pool for the final rerank and ` +
      `grows the ${counts.grown} with the best path scores (≥ ${sig(layer.threshold)}) at the next layer. ` +
      `The pool holds ${treeSize(context.step)} drafted nodes.`;
  },
  "talon-adaptive"(context, layer) {
    return DRAFT.talon(context, layer);
  },
  chain(context, layer) {
    const c = layer.candidates.find((x) => x.kept) ?? layer.candidates[0];
    if (!c) return `Draft token ${layer.depth}: the draft proposed nothing.`;
    const gamma = paramNow(context, "gamma") ?? "γ";
    const parent = context.step.nodes.get(`n${c.parent}`);
    const sampled = context.temperature > 0 && context.params.sample !== false;
    const how = sampled ? `samples ${quote(c.text)} from its distribution q (q = ${sig(c.q)})`
      : `takes its most likely token, ${quote(c.text)} (q = ${sig(c.q)})`;
    const last = !c.expanded ? ` That makes ${plural(layer.depth, "drafted token")}: the chain goes to the target.` : "";
    return `Draft token ${layer.depth} of γ = ${gamma}: after ${quote(parent?.text)} the draft ${how}. ` +
      `Its path score, the product of q along the chain, is ${sig(c.score)}.${last}`;
  },
  cast(context, layer) {
    const { params } = context;
    const counts = layerCounts(layer);
    const ranked = [...layer.candidates].sort((a, b) => (a.detail?.rank ?? 0) - (b.detail?.rank ?? 0));
    const stop = layer.candidates.find((c) => c.detail?.depth_ratio != null)?.detail;
    const firstLeft = ranked.find((c) => !c.expanded && c.detail?.ratio != null);
    let width = `CAST grows the best ${counts.grown}`;
    if (firstLeft && counts.grown > 0) {
      const d = firstLeft.detail;
      width += `: the next would add ${sig(d.marginal_utility)} expected tokens for ${sig(d.marginal_cost)} t₁ of drafting, ` +
        `${sig(d.ratio)} per t₁ < C1 = ${sig(params.c1 ?? firstLeft.threshold)}`;
    }
    let depth = "";
    if (stop) {
      depth = ` No further layer: it would gain about φ·u = ${sig(stop.phi)} × ${sig(stop.predicted_utility / (stop.phi || 1))} = ` +
        `${sig(stop.predicted_utility)} tokens for ${sig(stop.depth_cost)} t₁, ${sig(stop.depth_ratio)} per t₁` +
        `${stop.depth_ratio < (params.c2 ?? stop.depth_threshold) ? ` < C2 = ${sig(params.c2 ?? stop.depth_threshold)}` : " (depth limit)"}.`;
    }
    return `${plural(counts.total, "candidate")}, each worth its path score in expected accepted tokens; t₁ is one target ` +
      `forward of one token. ${counts.grown ? width : "CAST grows none of them"}.${depth} All stay in the pool for the rerank.`;
  },
  generic(context, layer) {
    const counts = layerCounts(layer);
    const pruned = Object.entries(counts.reasons).map(([why, n]) => `${n} ${why.replace("_", " ")}`).join(", ");
    return `${plural(counts.total, "candidate")}: ${counts.kept} kept${pruned ? `, pruned: ${pruned}` : ""}.`;
  },
};

// ---------------------------------------------------------------- rerank

const RERANK = {
  eagle(context, tree) {
    const kept = tree.nodes.length - 1;
    const dropped = tree.pruned.length;
    return `Of the ${kept + dropped} drafted nodes EAGLE keeps the m = ${context.params.total ?? kept} with the best path ` +
      `scores and drops ${dropped}. A child never scores above its parent (scores multiply probabilities), so the ` +
      `kept nodes still form one tree: ${plural(kept, "node")} go to the target.`;
  },
  cast(context, tree) {
    const kept = tree.nodes.length - 1;
    const dropped = tree.pruned.length;
    const next = [...tree.pruned].sort((a, b) => (a.detail?.rank ?? 0) - (b.detail?.rank ?? 0))
      .find((c) => c.detail?.ratio != null);
    const why = next ? `: the next would add ${sig(next.detail.marginal_utility)} tokens for ${sig(next.detail.marginal_cost)} t₁ ` +
      `of verify cost, ${sig(next.detail.ratio)} per t₁ < C3 = ${sig(context.params.c3 ?? next.threshold)}` : "";
    return `CAST adds drafted nodes to the verified tree best path score first, while each adds at least C3 = ` +
      `${sig(context.params.c3 ?? 2)} expected tokens per t₁ of the target's verify cost: ${kept} kept, ${dropped} dropped${why}.`;
  },
  generic(context, tree) {
    return `The final rerank keeps ${plural(tree.nodes.length - 1, "node")} and drops ${tree.pruned.length}.`;
  },
};

// ---------------------------------------------------------------- verify

function verifyText(context) {
  const tree = stepEvent(context.events, context.phase, "tree");
  const drafted = tree ? tree.nodes.length - 1 : 0;
  const root = rootText(context);
  if (drafted === 0) {
    return `One target forward over the single token ${root}, on top of the ${plural(context.prefix, "token")} already in ` +
      `the cache, gives the target's distribution for the next token. ${context.policy === "ar" ? "Plain decoding: one token per forward." : nothingDrafted(context)}`;
  }
  const chain = tree.nodes.every((n, i) => i === 0 || n.parent === i - 1);
  const attend = chain ? "each attending to the tokens before it, as in plain decoding"
    : "each attending only to the prefix, its own ancestors and itself (the tree-attention mask)";
  return `The target reads all ${drafted} drafted tokens and the root ${root} in one forward pass, ${attend}. ` +
    `Position ids are prefix + depth (${context.prefix} + d), so siblings share a position. One pass gives the target's ` +
    `own next-token distribution after every node at once.`;
}

// A policy that stops drafting says so by moving a parameter to 0 (cast's `speculates`, the chain's γ), with its
// numbers: while that move stands, each step that drafts nothing repeats why.
function nothingDrafted(context) {
  const latest = new Map();
  for (const e of context.events.slice(0, context.phase.end)) if (e.type === "policy_adjusted") latest.set(e.param, e);
  const off = [...latest.values()].find((e) => e.new === 0);
  const name = POLICY_NAMES[context.policy] ?? context.policy;
  return off ? `Nothing was drafted: ${name} stands down since it moved ${off.param} to 0 (${off.why}).` : "Nothing was drafted.";
}

// ---------------------------------------------------------------- accept

function acceptText(context) {
  const { phase, events, step } = context;
  const verify = stepEvent(events, phase, "verify");
  const walk = walkNodes(verify);
  const post = walk[phase.walked - 1];
  const here = step.nodes.get(step.postToId[post] ?? "n0");
  const at = here?.status === "root" ? `the root ${rootText(context)}` : quote(here?.shown ?? here?.text);
  const last = phase.walked === walk.length;
  const entry = verify.walk?.[phase.walked - 1];
  const checks = entry ? entry.checks : derivedChecks(verify, step, post);
  const emitted = verify.emitted;
  const parts = [];
  const greedy = context.temperature === 0 || checks.every((c) => c.rule === "greedy");
  if (greedy) {
    const accepted = checks.find((c) => c.accepted);
    const rejected = checks.filter((c) => !c.accepted).length;
    if (accepted) {
      parts.push(`After ${at} the target's own choice is ${quote(textOf(step, accepted))} (p = ${sig(accepted.p)}), which is drafted: accepted ✓.`);
      if (rejected) parts.push(`Its ${plural(rejected, "other drafted child", "other drafted children")} ${rejected === 1 ? "is" : "are"} rejected ✗.`);
    } else if (checks.length) {
      parts.push(`After ${at} the target prefers ${quote(emittedText(step, emitted))} (p = ${sig(emitted.p)}), which no child offers: ` +
        `${rejected === 1 ? "the drafted child is" : `the ${rejected} drafted children are`} rejected ✗ and ${quote(emittedText(step, emitted))} is the recovered token ↺.`);
    } else if (!emitted) {
      parts.push(endsText(at));
    } else {
      parts.push(context.policy === "ar"
        ? `The target's choice after ${at} is ${quote(emittedText(step, emitted))} (p = ${sig(emitted.p)}).`
        : `${at} ends its path: every drafted token on it was accepted, so the target's next token ${quote(emittedText(step, emitted))} ` +
          `(p = ${sig(emitted.p)}) comes free as the bonus ★.`);
    }
    return parts.join(" ");
  }
  const tried = checks.map((check, i) => sampledCheck(step, check, i === 0 ? `At ${at}, the` : "Then the"));
  parts.push(...tried);
  if (last && !emitted) {
    parts.push(endsText(at));
  } else if (last) {
    const left = entry?.residual_top?.find((t) => t.token === emitted.token);
    parts.push(emitted.kind === "bonus"
      ? `${at} ends its path, so the bonus token ${quote(emittedText(step, emitted))} ★ is drawn from the target's p (p = ${sig(emitted.p)}).`
      : `${checks.length > 1 ? "Every child was" : "The child was"} rejected, so the recovered token ${quote(emittedText(step, emitted))} ↺ ` +
        `is drawn from what is left of p (target p ${sig(emitted.p)}${left ? `, ${sig(left.p)} in the residual` : ""}). ` +
        "The output stays distributed exactly as the target's.");
  }
  return parts.join(" ");
}

/** The walk's last node where the text ends at an accepted draft (EOS, or max_new_tokens): nothing follows it. */
function endsText(at) {
  return `The text ends at ${at}: generation stops there, so nothing drafted after it is emitted and no recovered or bonus token is drawn.`;
}

function textOf(step, check) {
  const node = step.nodes.get(step.postToId[check.child]);
  return check.text ?? node?.shown ?? node?.text ?? "";
}

// The emitted token as the tree draws it: decoded with its parents' bytes where it completes a character.
function emittedText(step, emitted) {
  return step?.nodes.get("emitted")?.shown ?? emitted.text;
}

/** One child the walk tried at temperature > 0, opening with `lead` ("At “x”, the" / "Then the"). */
function sampledCheck(step, check, lead) {
  const token = quote(textOf(step, check));
  const mark = check.accepted ? "accepted ✓" : "rejected ✗";
  const vs = check.accepted ? "<" : "≥";
  if (check.u == null) return `${lead} drafted ${token} is ${mark}${check.p != null ? ` (p = ${sig(check.p)})` : ""}.`;
  if (check.rule === "deterministic") {
    return `${lead} drafted ${token} is a top-K pick, so it is accepted with probability p = ${sig(check.p)}: ` +
      `u = ${sig(check.u)} ${vs} ${sig(check.ratio)} → ${mark}${check.accepted ? "" : "; p loses it and is renormalised"}.`;
  }
  return `${lead} drafted ${token} has q = ${sig(check.q)} and p = ${sig(check.p)}: min(1, p/q) = ${sig(check.ratio)}; ` +
    `u = ${sig(check.u)} ${vs} ${sig(check.ratio)} → ${mark}${check.accepted ? "" : "; p becomes the residual norm(max(0, p − q))"}.`;
}

/** Checks at a walked node from a version-1 verify event: its children's verdicts, best q first (as acceptance tries them). */
function derivedChecks(verify, step, post) {
  return verify.nodes
    .filter((v) => v.verdict !== "unreached" && step.nodes.get(step.postToId[v.node])?.parent === (step.postToId[post] ?? "n0"))
    .sort((a, b) => b.q - a.q)
    .map((v) => ({ child: v.node, token: v.token, rule: "greedy", p: v.p, q: v.q, ratio: null, u: null,
                   accepted: v.verdict === "accepted" }));
}

// ---------------------------------------------------------------- commit

function commitText(context) {
  const { events, phase, prefix } = context;
  const verify = stepEvent(events, phase, "verify");
  const text = stepEvent(events, phase, "text");
  const tree = stepEvent(events, phase, "tree");
  const rows = tree ? tree.nodes.length : 1;
  const kept = verify ? verify.accepted_path.length : 1;
  const accepted = kept - 1;
  const dropped = rows - kept;
  const emitted = verify?.emitted;
  const parts = [];
  if (rows === 1) {
    const root = rootText(context);
    parts.push(`The cache grows by one row (${root.startsWith("(") ? root.slice(1, -1) : root}): ${prefix} → ${prefix + 1}.`);
  } else {
    parts.push(`The cache keeps the root and the ${plural(accepted, "accepted position")} and drops ${dropped}: ` +
      `${prefix} + ${rows} rows after verify, ${prefix + kept} after the commit.`);
  }
  if (text && emitted) {
    const tokens = accepted ? `${accepted} accepted + ${quote(emittedText(context.step, emitted))} ${emitted.kind === "bonus" ? "as the bonus ★" : "recovered ↺"}`
      : quote(emittedText(context.step, emitted));
    parts.push(`The step emits ${plural(text.tokens.length, "token")}: ${tokens}.`);
  } else if (text && verify) {
    const end = context.step.nodes.get(context.step.postToId[verify.accepted_path[verify.accepted_path.length - 1]]);
    parts.push(`The step emits ${plural(text.tokens.length, "accepted draft")}; the text ends at ${quote(end?.text)}, ` +
      "so no recovered or bonus token follows.");
  }
  const adjustments = events.slice(0, phase.end).filter((e) => e.type === "policy_adjusted" && e.step === phase.step);
  for (const a of adjustments) {
    parts.push(`${POLICY_NAMES[context.policy] ?? context.policy} moves ${a.param} ${sig(a.old, 3)} → ${sig(a.new, 3)}: ${a.why}.`);
  }
  const metrics = events.slice(0, phase.end).filter((e) => e.type === "step_metrics");
  if (metrics.length > 1) {
    const tau = metrics.reduce((s, m) => s + m.emitted, 0) / metrics.length;
    parts.push(`τ so far: ${sig(tau, 3)} tokens per step.`);
  }
  return parts.join(" ");
}
