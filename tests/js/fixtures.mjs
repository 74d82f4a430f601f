// Hand-written runs for the pure modules' tests, in the engine's event schema (version 2: verify events
// carry the acceptance walk; version 3: a step is reported as far as its text goes). Small enough to check
// every number by hand.

const header = { schema_version: 2, run_id: "t1", policy: "talon" };

export function candidate(parent, token, text, depth, score, kept, node, reason, extra = {}) {
  return { parent, token, text, depth, q: score, score, source: "head", kept, expanded: kept, reason,
           threshold: null, node, detail: {}, ...extra };
}

const odds = (token, text, p, q) => ({ token, text, p, q });

// Step 1: root "x" -> a(1), b(2) kept, c pruned (budget); layer 2: a -> d(3) kept, e pruned (below μ·m₂);
// b -> f(4) kept. The target takes a, then prefers g after a: d rejected, g recovered.
// Step 2: root "g" -> h(1); the target takes h, then i as the bonus.
export const talonRun = [
  { ...header, type: "run_started", prompt: "p", prompt_tokens: 10, params: { budget: 60, top_k: 10, mu: 0.03 },
    drafter: "head", target: "t", draft: "d", device: "cpu", dtype: "float32", seed: 0, temperature: 0,
    top_k: 0, top_p: 1, max_new_tokens: 4 },
  { ...header, type: "draft_layer", step: 1, depth: 1, threshold: null, anchor: null, candidates: [
    candidate(0, 97, "a", 1, 0.6, true, 1, "topk"),
    candidate(0, 98, " b", 1, 0.3, true, 2, "topk"),
    candidate(0, 99, "c", 1, 0.05, false, null, "budget"),
  ] },
  { ...header, type: "draft_layer", step: 1, depth: 2, threshold: 0.015, anchor: 0.5, candidates: [
    candidate(1, 100, "d", 2, 0.5, true, 3, "threshold", { threshold: 0.015 }),
    candidate(1, 101, "e", 2, 0.01, false, null, "below_threshold", { threshold: 0.015 }),
    candidate(2, 102, "f", 2, 0.2, true, 4, "threshold", { threshold: 0.015 }),
  ] },
  { ...header, type: "tree", step: 1, pruned: [], nodes: [
    { node: 0, origin: 0, parent: -1, token: 42, text: "x", depth: 0, q: 1, score: 1, source: "root" },
    { node: 1, origin: 1, parent: 0, token: 97, text: "a", depth: 1, q: 0.6, score: 0.6, source: "head" },
    { node: 2, origin: 2, parent: 0, token: 98, text: " b", depth: 1, q: 0.3, score: 0.3, source: "head" },
    { node: 3, origin: 3, parent: 1, token: 100, text: "d", depth: 2, q: 0.5, score: 0.5, source: "head" },
    { node: 4, origin: 4, parent: 2, token: 102, text: "f", depth: 2, q: 0.2, score: 0.2, source: "head" },
  ] },
  { ...header, type: "verify", step: 1, accepted_path: [0, 1],
    nodes: [
      { node: 1, token: 97, p: 0.7, q: 0.6, verdict: "accepted" },
      { node: 2, token: 98, p: 0.1, q: 0.3, verdict: "rejected" },
      { node: 3, token: 100, p: 0.2, q: 0.5, verdict: "rejected" },
      { node: 4, token: 102, p: null, q: 0.2, verdict: "unreached" },
    ],
    emitted: { parent: 1, token: 103, text: "g", p: 0.6, kind: "recovered" },
    walk: [
      { node: 0, top: [odds(97, "a", 0.7, 0.6), odds(98, " b", 0.1, 0.3)],
        checks: [{ child: 1, token: 97, rule: "greedy", p: 0.7, q: 0.6, ratio: 1, u: null, accepted: true },
                 { child: 2, token: 98, rule: "greedy", p: 0.1, q: 0.3, ratio: 0, u: null, accepted: false }],
        residual_top: null, drawn: null },
      { node: 1, top: [odds(103, "g", 0.6, null), odds(100, "d", 0.2, 0.5)],
        checks: [{ child: 3, token: 100, rule: "greedy", p: 0.2, q: 0.5, ratio: 0, u: null, accepted: false }],
        residual_top: [odds(103, "g", 0.6, null)], drawn: 103 },
    ] },
  { ...header, type: "text", step: 1, tokens: [97, 103], text: "ag", accepted: 1 },
  { ...header, type: "step_metrics", step: 1, accepted: 1, emitted: 2, tree_size: 4, depth: 2, width: 2,
    draft_forwards: 2, draft_ms: 4, draft_forward_ms: 3, verify_ms: 10, other_ms: 1, new_tokens: 2 },
  { ...header, type: "draft_layer", step: 2, depth: 1, threshold: null, anchor: null, candidates: [
    candidate(0, 104, "h", 1, 0.9, true, 1, "topk"),
  ] },
  { ...header, type: "tree", step: 2, pruned: [], nodes: [
    { node: 0, origin: 0, parent: -1, token: 103, text: "g", depth: 0, q: 1, score: 1, source: "root" },
    { node: 1, origin: 1, parent: 0, token: 104, text: "h", depth: 1, q: 0.9, score: 0.9, source: "head" },
  ] },
  { ...header, type: "verify", step: 2, accepted_path: [0, 1],
    nodes: [{ node: 1, token: 104, p: 0.8, q: 0.9, verdict: "accepted" }],
    emitted: { parent: 1, token: 105, text: "i", p: 0.5, kind: "bonus" },
    walk: [
      { node: 0, top: [odds(104, "h", 0.8, 0.9)],
        checks: [{ child: 1, token: 104, rule: "greedy", p: 0.8, q: 0.9, ratio: 1, u: null, accepted: true }],
        residual_top: null, drawn: null },
      { node: 1, top: [odds(105, "i", 0.5, null)], checks: [], residual_top: null, drawn: 105 },
    ] },
  { ...header, type: "text", step: 2, tokens: [104, 105], text: "hi", accepted: 1 },
  { ...header, type: "step_metrics", step: 2, accepted: 1, emitted: 2, tree_size: 1, depth: 1, width: 1,
    draft_forwards: 1, draft_ms: 2, draft_forward_ms: 1, verify_ms: 6, other_ms: 1, new_tokens: 4 },
  { ...header, type: "run_finished", text: "aghi", tokens: [97, 103, 104, 105], new_tokens: 4, steps: 2, tau: 2,
    delta: 1.5, c: 0.2, tokens_per_s: 100, wall_s: 0.04, draft_ms: 6, draft_forward_ms: 4, verify_ms: 16,
    other_ms: 2, stop_reason: "max_new_tokens" },
];

// A chain step at temperature 0.8: the draft proposed u(1) -> v(2) by sampling; the target accepts u
// (u_draw 0.3 < min(1, 0.5/0.4) = 1), rejects v (0.9 ≥ 0.1/0.6), and draws w from the residual.
const sampledHeader = { schema_version: 2, run_id: "s1", policy: "chain" };
export const sampledRun = [
  { ...sampledHeader, type: "run_started", prompt: "p", prompt_tokens: 5, params: { gamma: 2 }, drafter: "head",
    target: "t", draft: "d", device: "cpu", dtype: "float32", seed: 0, temperature: 0.8, top_k: 0, top_p: 1,
    max_new_tokens: 8 },
  { ...sampledHeader, type: "draft_layer", step: 1, depth: 1, candidates: [candidate(0, 201, "u", 1, 0.4, true, 1, "topk")] },
  { ...sampledHeader, type: "draft_layer", step: 1, depth: 2, candidates: [candidate(1, 202, "v", 2, 0.24, true, 2, "topk")] },
  { ...sampledHeader, type: "tree", step: 1, pruned: [], nodes: [
    { node: 0, origin: 0, parent: -1, token: 200, text: "r", depth: 0, q: 1, score: 1, source: "root" },
    { node: 1, origin: 1, parent: 0, token: 201, text: "u", depth: 1, q: 0.4, score: 0.4, source: "head" },
    { node: 2, origin: 2, parent: 1, token: 202, text: "v", depth: 2, q: 0.6, score: 0.24, source: "head" },
  ] },
  { ...sampledHeader, type: "verify", step: 1, accepted_path: [0, 1],
    nodes: [
      { node: 1, token: 201, p: 0.5, q: 0.4, verdict: "accepted" },
      { node: 2, token: 202, p: 0.1, q: 0.6, verdict: "rejected" },
    ],
    emitted: { parent: 1, token: 203, text: "w", p: 0.3, kind: "recovered" },
    walk: [
      { node: 0, top: [odds(201, "u", 0.5, 0.4), odds(209, "z", 0.2, 0.3)],
        checks: [{ child: 1, token: 201, rule: "sampled", p: 0.5, q: 0.4, ratio: 1, u: 0.3, accepted: true }],
        residual_top: null, drawn: null },
      { node: 1, top: [odds(203, "w", 0.3, 0.1), odds(202, "v", 0.1, 0.6), odds(204, "y", 0.25, 0.2)],
        checks: [{ child: 2, token: 202, rule: "sampled", p: 0.1, q: 0.6, ratio: 0.1 / 0.6, u: 0.9, accepted: false }],
        residual_top: [odds(203, "w", 0.5, null), odds(204, "y", 0.125, null)], drawn: 203 },
    ] },
  { ...sampledHeader, type: "text", step: 1, tokens: [201, 203], text: "uw", accepted: 1 },
  { ...sampledHeader, type: "step_metrics", step: 1, accepted: 1, emitted: 2, tree_size: 2, depth: 2, width: 1,
    draft_forwards: 2, draft_ms: 2, draft_forward_ms: 2, verify_ms: 5, other_ms: 1, new_tokens: 2 },
];

// A talon step whose text ends at an accepted draft (schema 3): root "x" -> a(1), " b"(2); a -> ⟨end⟩(3) -> c(4).
// The target takes a, rejects b, takes the end of turn; the run stops there, so the event reports the walk up
// to node 3 and no further: c is unreached (though the target would have taken it) and nothing is emitted.
const endedHeader = { schema_version: 3, run_id: "e1", policy: "talon" };
export const endedRun = [
  { ...endedHeader, type: "run_started", prompt: "p", prompt_tokens: 10, params: { budget: 60, top_k: 10, mu: 0.03 },
    drafter: "head", target: "t", draft: "d", device: "cpu", dtype: "float32", seed: 0, temperature: 0,
    top_k: 0, top_p: 1, max_new_tokens: 8 },
  { ...endedHeader, type: "draft_layer", step: 1, depth: 1, threshold: null, anchor: null, candidates: [
    candidate(0, 97, "a", 1, 0.6, true, 1, "topk"),
    candidate(0, 98, " b", 1, 0.3, true, 2, "topk"),
  ] },
  { ...endedHeader, type: "draft_layer", step: 1, depth: 2, threshold: 0.015, anchor: 0.5, candidates: [
    candidate(1, 2, "<|im_end|>", 2, 0.5, true, 3, "threshold", { threshold: 0.015 }),
  ] },
  { ...endedHeader, type: "draft_layer", step: 1, depth: 3, threshold: 0.012, anchor: 0.4, candidates: [
    candidate(3, 99, "c", 3, 0.4, true, 4, "threshold", { threshold: 0.012 }),
  ] },
  { ...endedHeader, type: "tree", step: 1, pruned: [], nodes: [
    { node: 0, origin: 0, parent: -1, token: 42, text: "x", depth: 0, q: 1, score: 1, source: "root" },
    { node: 1, origin: 1, parent: 0, token: 97, text: "a", depth: 1, q: 0.6, score: 0.6, source: "head" },
    { node: 2, origin: 2, parent: 0, token: 98, text: " b", depth: 1, q: 0.3, score: 0.3, source: "head" },
    { node: 3, origin: 3, parent: 1, token: 2, text: "<|im_end|>", depth: 2, q: 0.5, score: 0.5, source: "head" },
    { node: 4, origin: 4, parent: 3, token: 99, text: "c", depth: 3, q: 0.4, score: 0.4, source: "head" },
  ] },
  { ...endedHeader, type: "verify", step: 1, accepted_path: [0, 1, 3],
    nodes: [
      { node: 1, token: 97, p: 0.7, q: 0.6, verdict: "accepted" },
      { node: 2, token: 98, p: 0.1, q: 0.3, verdict: "rejected" },
      { node: 3, token: 2, p: 0.9, q: 0.5, verdict: "accepted" },
      { node: 4, token: 99, p: null, q: 0.4, verdict: "unreached" },
    ],
    emitted: null,
    walk: [
      { node: 0, top: [odds(97, "a", 0.7, 0.6), odds(98, " b", 0.1, 0.3)],
        checks: [{ child: 1, token: 97, rule: "greedy", p: 0.7, q: 0.6, ratio: 1, u: null, accepted: true },
                 { child: 2, token: 98, rule: "greedy", p: 0.1, q: 0.3, ratio: 0, u: null, accepted: false }],
        residual_top: null, drawn: null },
      { node: 1, top: [odds(2, "<|im_end|>", 0.9, 0.5)],
        checks: [{ child: 3, token: 2, rule: "greedy", p: 0.9, q: 0.5, ratio: 1, u: null, accepted: true }],
        residual_top: null, drawn: null },
      { node: 3, top: [odds(99, "c", 0.6, 0.4)], checks: [], residual_top: null, drawn: null },
    ] },
  { ...endedHeader, type: "text", step: 1, tokens: [97, 2], text: "a", accepted: 2 },
  { ...endedHeader, type: "step_metrics", step: 1, accepted: 2, emitted: 2, tree_size: 4, depth: 3, width: 2,
    draft_forwards: 3, draft_ms: 4, draft_forward_ms: 3, verify_ms: 10, other_ms: 1, new_tokens: 2 },
  { ...endedHeader, type: "run_finished", text: "a", tokens: [97, 2], new_tokens: 2, steps: 1, tau: 2, delta: 3,
    c: 0.1, tokens_per_s: 130, wall_s: 0.015, draft_ms: 4, draft_forward_ms: 3, verify_ms: 10, other_ms: 1,
    stop_reason: "eos" },
];

// Plain decoding: no draft, a root-only verify per step.
const arHeader = { schema_version: 1, run_id: "a1", policy: "ar" };
export const arRun = [
  { ...arHeader, type: "run_started", prompt: "p", prompt_tokens: 10, params: {}, drafter: "none", target: "t",
    draft: null, device: "cpu", dtype: "float32", seed: 0, temperature: 0, top_k: 0, top_p: 1, max_new_tokens: 2 },
  ...[1, 2].flatMap((step) => [
    { ...arHeader, type: "verify", step, nodes: [], accepted_path: [0],
      emitted: { parent: 0, token: 300 + step, text: `t${step}`, p: 0.9, kind: "bonus" } },
    { ...arHeader, type: "text", step, tokens: [300 + step], text: `t${step}`, accepted: 0 },
    { ...arHeader, type: "step_metrics", step, accepted: 0, emitted: 1, tree_size: 0, depth: 0, width: 0,
      draft_forwards: 0, draft_ms: 0, draft_forward_ms: 0, verify_ms: 5, other_ms: 0, new_tokens: step },
  ]),
  { ...arHeader, type: "run_finished", text: "t1t2", tokens: [301, 302], new_tokens: 2, steps: 2, tau: 1, delta: 0,
    c: null, tokens_per_s: 200, wall_s: 0.01, draft_ms: 0, draft_forward_ms: 0, verify_ms: 10, other_ms: 0,
    stop_reason: "max_new_tokens" },
];

// One eagle-like step whose rerank drops a kept node, so tree positions differ from draft node ids.
const rerankHeader = { schema_version: 2, run_id: "r1", policy: "talon" };

// Step 0: root -> a(1), b(2) kept, c pruned; layer 2: a -> d(3) kept, e pruned.
// Rerank drops b (old 2), so the verified tree is [root, a, d] = old [0, 1, 3].
export const rerankStep = [
  { ...rerankHeader, type: "draft_layer", step: 0, depth: 1, threshold: null, anchor: null, candidates: [
    candidate(0, 97, "a", 1, 0.6, true, 1, "topk"),
    candidate(0, 98, " b", 1, 0.3, true, 2, "topk"),
    candidate(0, 99, "c", 1, 0.05, false, null, "budget"),
  ] },
  { ...rerankHeader, type: "draft_layer", step: 0, depth: 2, threshold: 0.02, anchor: 0.5, candidates: [
    candidate(1, 100, "\n", 2, 0.5, true, 3, "threshold"),
    candidate(1, 101, "e", 2, 0.01, false, null, "below_threshold"),
  ] },
  { ...rerankHeader, type: "tree", step: 0, nodes: [
    { node: 0, origin: 0, parent: -1, token: 42, text: "x", depth: 0, q: 1, score: 1, source: "root" },
    { node: 1, origin: 1, parent: 0, token: 97, text: "a", depth: 1, q: 0.6, score: 0.6, source: "draft-lm" },
    { node: 2, origin: 3, parent: 1, token: 100, text: "\n", depth: 2, q: 0.5, score: 0.5, source: "draft-lm" },
  ], pruned: [candidate(0, 98, " b", 1, 0.3, false, 2, "rerank")] },
  { ...rerankHeader, type: "verify", step: 0, nodes: [
    { node: 1, token: 97, p: 0.9, q: 0.6, verdict: "accepted" },
    { node: 2, token: 100, p: 0.1, q: 0.5, verdict: "rejected" },
  ], emitted: { parent: 1, token: 102, text: "f", p: 0.8, kind: "recovered" }, accepted_path: [0, 1] },
  { ...rerankHeader, type: "text", step: 0, tokens: [97, 102], text: "af", accepted: 1 },
  { ...rerankHeader, type: "step_metrics", step: 0, accepted: 1, emitted: 2, tree_size: 2, depth: 2, width: 1,
    draft_forwards: 2, draft_ms: 1, verify_ms: 2, other_ms: 0, new_tokens: 2 },
];
