// What the server serves the page (/api/policies, /api/request), in the parts the node tests read.
// tests/test_served_fixtures.py checks every value here against what the server serves today.

export const SERVED_POLICIES = {
  ar: { presentation: { title: "plain decoding", drafts: false, reranks: false, symbols: {} } },
  chain: { presentation: { title: "chain (Leviathan et al.)", drafts: true, reranks: false,
                           symbols: { "γ": "gamma" } } },
  eagle: { presentation: { title: "EAGLE-2/3", drafts: true, reranks: true,
                           symbols: { D: "depth", K: "top_k", m: "total" } } },
  talon: { presentation: { title: "TALON", drafts: true, reranks: false,
                           symbols: { N: "budget", K: "top_k", "μ": "mu", k: "forced_layers" } },
           properties: { mu: { default: 0.03, exclusiveMinimum: 0, maximum: 1, type: "number" },
                         budget: { default: 60, minimum: 1, maximum: 512, type: "integer" } } },
};

export const SERVED_REQUEST = {
  properties: {
    prompt: { maxLength: 32000 },
    temperature: { default: 0, minimum: 0, maximum: 5, minimumAboveZero: 0.01, type: "number" },
    seed: { default: 0, minimum: 0, maximum: 9223372036854775807, type: "integer" },
    max_new_tokens: { default: 128, minimum: 1, maximum: 8192, type: "integer" },
  },
};
