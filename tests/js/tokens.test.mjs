// Tokens as a room reads them: bytes of one character decoded together, plain decoding's root named
// as the previous step's token and its token not called a bonus, the chat template's markers explained.
import assert from "node:assert/strict";
import { test } from "node:test";

import { describeNode, foldEvents } from "../../static/js/model/events.js";
import { bytesLabel, decodeByteRun } from "../../static/js/model/format.js";
import { nodeLabel } from "../../static/js/model/layout.js";
import { arRun } from "./fixtures.mjs";

test("bytes_of_one_character_decode_together_and_a_partial_run_shows_its_bytes", () => {
  assert.equal(decodeByteRun(["20f09f", "8c", "8a"]), " 🌊");
  assert.equal(decodeByteRun(["20f09f", "8c"]), null);
  assert.equal(bytesLabel("f09f"), "⟨f0\u20099f⟩");
});

test("a_path_of_byte_tokens_reads_as_the_character_it_spells", () => {
  const header = { schema_version: 3, run_id: "b", policy: "talon" };
  const candidate = (parent, token, hex, node) => ({ parent, token, text: "\uFFFD", depth: node, q: 0.9, score: 0.9,
    source: "head", kept: true, expanded: true, reason: "threshold", node, byte_hex: hex });
  const run = foldEvents([
    { ...header, type: "draft_layer", step: 1, depth: 1, candidates: [candidate(0, 1, "20f09f", 1)] },
    { ...header, type: "draft_layer", step: 1, depth: 2, candidates: [candidate(1, 2, "8c", 2)] },
    { ...header, type: "draft_layer", step: 1, depth: 3, candidates: [candidate(2, 3, "8a", 3)] },
  ]);
  const nodes = run.steps[0].nodes;
  assert.deepEqual(["n1", "n2", "n3"].map((id) => nodeLabel(nodes.get(id))), ["⟨20\u2009f0\u2009…", "⟨8c⟩", "␣🌊"]);
  assert.match(describeNode(nodes.get("n3")).map((r) => r.join(" ")).join("\n"), /completes " 🌊" with the bytes of its 2 parent/);
});

test("plain_decodings_root_is_the_previous_token_and_its_token_is_not_a_bonus", () => {
  const run = foldEvents(arRun);
  const [first, second] = run.steps;
  assert.equal(nodeLabel(first.nodes.get("n0")), "prompt…");
  assert.equal(nodeLabel(second.nodes.get("n0")), "…t1");
  assert.equal(nodeLabel(second.nodes.get("emitted")), "t2", "no ★: the target's own token");
  assert.match(describeNode(second.nodes.get("emitted")).at(-1)[1], /target's own next token/);
});

test("the_chat_templates_start_marker_is_explained_on_hover", () => {
  const rows = describeNode({ text: "<|im_start|>", depth: 1, status: "pruned", reason: "topk", q: 0.1, score: 0.1, p: null });
  assert.match(rows.map((r) => r[1]).join(" "), /start-of-turn marker/);
});
