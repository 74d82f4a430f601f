// What the page knows of the policies: the server's declarations, read from /api/policies (each
// policy's parameter schema with its `presentation`, engine/policies/__init__.py policy_schemas),
// never written here. No DOM, and no policy named: the teaching text (narration.js) is the one
// module that speaks of policies by name.

/** A policy's presentation: { title, drafts, reranks, symbols }; one the server did not serve drafts, without symbols. */
export function presentationOf(policies, policy) {
  const served = policies?.[policy]?.presentation ?? {};
  return { title: served.title ?? policy, drafts: served.drafts ?? true, reranks: served.reranks ?? false,
           symbols: served.symbols ?? {} };
}

/** The policy that drafts nothing: plain decoding, the baseline every speedup is measured against. */
export function baselinePolicy(policies) {
  return Object.keys(policies ?? {}).find((name) => policies[name].presentation?.drafts === false) ?? null;
}

export function isBaseline(policies, policy) {
  return policy != null && policy === baselinePolicy(policies);
}

/** Whether every step of the policy ends in a rerank of what it drafted (a phase of its own). */
export function reranks(policies, policy) {
  return presentationOf(policies, policy).reranks;
}

/**
 * The value of the parameter a policy names by a paper's symbol ("γ" for a chain's length), from a
 * run's parameters; null where the policy has no such symbol.
 *
 * symbolValue({ line: { presentation: { symbols: { "γ": "gamma" } } } }, "line", "γ", { gamma: 5 }) -> 5
 */
export function symbolValue(policies, policy, symbol, params) {
  const name = symbolParam(policies, policy, symbol);
  return name == null ? null : params?.[name] ?? null;
}

/** The parameter a paper's symbol names in a policy ("γ" → "gamma" for the chain), or null. */
export function symbolParam(policies, policy, symbol) {
  return presentationOf(policies, policy).symbols[symbol] ?? null;
}

/**
 * Panes a comparison opens with: the default policy first, then every other drafting policy the
 * server lists, in its order, up to `count`.
 */
export function defaultPanes(policies, defaultPolicy, count) {
  const drafting = Object.keys(policies ?? {}).filter((name) => presentationOf(policies, name).drafts);
  const first = drafting.includes(defaultPolicy) ? [defaultPolicy] : [];
  return [...first, ...drafting.filter((name) => name !== defaultPolicy)].slice(0, count);
}
