// The URL: values checked against the schemas, compare mode, and links of any length.
import assert from "node:assert/strict";
import { test } from "node:test";

import {
  MAX_QUERY, checkSetup, decodeCompare, decodeLink, decodePane, encodeCompare, encodeLink, encodePane, pack, setupRules,
  unpack,
} from "../../static/js/model/setup.js";
import { SERVED_REQUEST } from "./served.mjs";

const SCHEMAS = {
  ar: { properties: {} },
  talon: { properties: {
    mu: { type: "number", default: 0.03, exclusiveMinimum: 0, maximum: 1, description: "gate" },
    budget: { type: "integer", default: 60, minimum: 1, maximum: 512, description: "nodes" },
  } },
};
const RULES = setupRules(SERVED_REQUEST, "talon");

test("unknown_policies_and_out_of_range_values_are_named_and_replaced_by_defaults", () => {
  const { setup, problems } = checkSetup(
    { policy: "nope", temperature: 9, seed: -1, max_new_tokens: 64, params: { mu: 2 } }, SCHEMAS, RULES);
  assert.equal(setup.policy, "talon");
  assert.equal(setup.temperature, 0);
  assert.equal(setup.seed, 0);
  assert.equal(setup.max_new_tokens, 64);
  assert.deepEqual(setup.params, {});
  assert.deepEqual(problems, [
    'unknown policy "nope" (using talon; known: ar, talon)',
    "temperature 9 is outside 0–5 (using 0)",
    "seed -1 is outside 0–9007199254740991 (using 0)",
    "talon mu 2 is outside 0–1 (using the default 0.03)",
  ]);
});

test("parameters_are_checked_for_kind_bounds_and_existence", () => {
  const { setup, problems } = checkSetup(
    { policy: "talon", params: { mu: 0, budget: 2.5, bogus: 1, top: "x" } }, SCHEMAS, RULES);
  assert.deepEqual(setup.params, {});
  assert.equal(problems.length, 4);
  assert.match(problems[0], /mu 0 is outside 0–1/); // exclusive minimum
  assert.match(problems[1], /budget 2.5 is not a whole number/);
  assert.match(problems[2], /has no parameter "bogus"/);
  const good = checkSetup({ policy: "talon", params: { mu: 0.05, budget: 40 } }, SCHEMAS, RULES);
  assert.deepEqual([good.setup.params, good.problems], [{ mu: 0.05, budget: 40 }, []]);
  const text = checkSetup({ policy: "talon", params: decodePane("talon:mu=0.05:budget=40").params }, SCHEMAS, RULES);
  assert.deepEqual([text.setup.params, text.problems], [{ mu: 0.05, budget: 40 }, []], "a link's text read by the schema");
});

test("the_forms_bounds_and_defaults_are_the_served_requests", () => {
  assert.deepEqual(RULES.defaults, { policy: "talon", temperature: 0, seed: 0, max_new_tokens: 128 });
  assert.equal(RULES.limits.max_new_tokens.max, 8192);
  assert.equal(RULES.limits.prompt.maxLength, 32000);
  const { setup, problems } = checkSetup({ temperature: 0.001 }, SCHEMAS, RULES);
  assert.equal(setup.temperature, 0);
  assert.deepEqual(problems, ["temperature 0.001 is neither 0 nor at least 0.01 (using 0)"]);
  assert.deepEqual(checkSetup({ temperature: 0.01 }, SCHEMAS, RULES).problems, []);
});

test("panes_round_trip_in_the_benchs_policy_syntax", () => {
  assert.equal(encodePane({ policy: "talon", params: { mu: 0.05, budget: 40 } }), "talon:mu=0.05:budget=40");
  assert.deepEqual(decodePane("talon:mu=0.05:budget=40"), { policy: "talon", params: { mu: "0.05", budget: "40" } });
  const query = encodeCompare({ panes: [{ policy: "talon", params: {} }, { policy: "eagle", params: { depth: 3 } }],
                                align: "tokens" });
  assert.equal(query.toString(), "compare=talon%2Ceagle%3Adepth%3D3&align=tokens");
  assert.deepEqual(decodeCompare(`?${query}`), { panes: [{ policy: "talon", params: {} },
                                                        { policy: "eagle", params: { depth: "3" } }], align: "tokens" });
  assert.deepEqual(decodeCompare("?compare=1&trace=x"), { panes: [], align: "step" });
  assert.equal(decodeCompare("?trace=x"), null);
});

test("short_setups_stay_in_the_query", async () => {
  const link = await encodeLink({ setup: { prompt: "hi", policy: "talon", params: { mu: 0.05 }, seed: 1 },
                                  view: { trace: "t", step: 3 }, compare: { panes: [], align: "step" } });
  assert.ok(link.startsWith("?") && !link.includes("#"));
  const [search] = link.split("#");
  const back = await decodeLink(search, "");
  assert.equal(back.setup.prompt, "hi");
  assert.deepEqual(checkSetup(back.setup, SCHEMAS, RULES).setup.params, { mu: 0.05 });
  assert.equal(back.view.step, "3");
  assert.deepEqual(back.compare, { panes: [], align: "step" });
});

test("a_9000_cjk_character_prompt_goes_into_the_fragment_and_round_trips", async () => {
  const prompt = Array.from({ length: 9000 }, (_, i) => String.fromCodePoint(0x4e00 + ((i * 7919) % 20000))).join("");
  const setup = { prompt, policy: "talon", params: { budget: 30 }, temperature: 0, seed: 0, max_new_tokens: 64 };
  const link = await encodeLink({ setup, view: { trace: "x" }, compare: { panes: [{ policy: "eagle", params: {} }] } });
  const [search, hash] = link.split("#");
  assert.ok(search.length <= MAX_QUERY, "the query a server sees stays short");
  assert.ok(hash.startsWith("setup=z."));
  assert.ok(link.length < 9000 * 9 / 2, `packed: ${link.length} characters, not 81 000 percent-encoded`);
  const back = await decodeLink(search, `#${hash}`);
  assert.equal(back.setup.prompt, prompt);
  assert.deepEqual(back.setup.params, { budget: 30 });
  assert.equal(back.view.trace, "x");
  assert.equal(back.compare.panes[0].policy, "eagle");
});

test("packing_round_trips_any_text", async () => {
  const value = { prompt: "emoji 🧪 and\nnewlines & = # % +", n: 1 };
  assert.deepEqual(await unpack(await pack(value)), value);
  await assert.rejects(unpack("q.abc"), /unknown format/);
});
