"""The speculative engine: one run = prefill, then steps of draft → verify → accept → commit until done.

Every step grows a tree layer by layer (engine/drafting.py: the drafter
proposes children of the frontier, the policy keeps or prunes each
candidate), lets the policy rerank it, verifies all of it with one target
forward under a tree mask, walks down the tree keeping the path the
acceptance rule allows (engine/acceptance.py), compacts the target's KV cache
to that path and tells the drafter. What happened is handed to a reporter
(engine/reporting.py) that turns it into the typed events the CLI, the
benchmark, trace files and the web read.
"""

from __future__ import annotations

import threading
import uuid
from contextlib import contextmanager
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import Callable, Generator, Iterator, Literal

import torch

from engine.acceptance import Acceptance, accept_greedy, accept_sampled, row_argmax
from engine.costs import FASTEST, CostTable, costs_note, fastest_policy_note, memory_note, table_path_for
from engine.drafters.base import DraftForward, Drafter
from engine.drafters.memory import MemoryBank
from engine.drafting import Draft, Growing, grow_layers, run_growing
from engine.errors import RequestError
from engine.events import CostsSummary, RunFinished
from engine.interface import Emit, EngineInfo
from engine.models import native
from engine.models.base import BatchItem, ForwardOutput, LanguageModel
from engine.models.codec import Codec
from engine.models.device import clock, one_torch_thread
from engine.models.fastlm import forward_choice
from engine.policies import DEFAULT_POLICY, POLICIES, policy_class, policy_params
from engine.policies.base import Policy, PolicyContext, PolicyParams, StepOutcome
from engine.reporting import RunReporter, VerifiedStep
from engine.request import GenerationRequest
from engine.sampling import probs_from_logits
from engine.timing import Timings
from engine.tree import DraftTree, position_ids, tree_attention_allowed
from engine.whatif import WhatIfRequest, check_prefix


@dataclass
class Prepared:
    """A request checked against the engine: its policy's class and checked parameters, drafter name and
    prompt ids. The policy itself is built when first asked for: once per run, not once per check."""

    request: GenerationRequest
    policy_class: type[Policy]
    params: PolicyParams
    context: PolicyContext
    drafter: str | None  # None for a policy that drafts nothing
    prompt_ids: list[int]

    @cached_property
    def policy(self) -> Policy:
        return self.policy_class(self.params, self.context)


class SpecEngine:
    """A loaded target (and drafters) that runs generation requests one at a time."""

    def __init__(self, target: LanguageModel, codec: Codec, drafters: dict[str, Callable[[], Drafter]],
                 default_drafter: str, draft_lm: LanguageModel | None = None, costs: CostTable | None = None,
                 memory: MemoryBank | None = None):
        assert default_drafter in drafters, default_drafter
        self.target = target
        self.codec = codec
        self.drafters = drafters
        self.default_drafter = default_drafter
        self.draft_lm = draft_lm
        self.memory = memory  # the process's suffix memory (engine/drafters/memory.py); None: off
        self.context = PolicyContext(costs=costs or CostTable.assumed())
        self._lock = threading.Lock()
        self._built: dict[str, Drafter] = {}

    @property
    def costs(self) -> CostTable:
        return self.context.costs

    @property
    def cost_table_path(self) -> Path:
        """Where this target's cost table is saved for its device and dtype (engine/costs.py)."""
        return table_path_for(self.target)

    @property
    def default_policy(self) -> str:
        """The policy `specscope bench --record-default` measured fastest on this device, model and dtype,
        recorded with the cost table; talon where nothing was measured."""
        recorded = self.costs.meta.get(FASTEST)
        return recorded if recorded in POLICIES else DEFAULT_POLICY

    @property
    def default_policy_note(self) -> str:
        """Which policy a request without one gets, and why."""
        return fastest_policy_note(self.costs, self.default_policy)

    def describe(self) -> EngineInfo:
        return EngineInfo(target=self.target.name, draft=self.draft_lm.name if self.draft_lm else None,
                          device=str(self.target.device), dtype=str(self.target.dtype).removeprefix("torch."),
                          drafters=list(self.drafters), default_drafter=self.default_drafter,
                          default_policy=self.default_policy, default_policy_note=self.default_policy_note,
                          costs=self.costs.target.source,
                          costs_note=costs_note(self.costs, self.forward_name),
                          suffix_memory_tokens=self.memory.budget if self.memory else 0)

    def new_memory(self) -> MemoryBank | None:
        """A fresh suffix memory like the engine's own (its budget, no file), for one client; None when off."""
        return MemoryBank(self.memory.budget, target=self.memory.target) if self.memory else None

    def costs_note_for(self, policies: list[str], batch: int = 1) -> str | None:
        """What to tell a user of these policies about the costs, run `batch` at a time: None unless one reads
        costs that were assumed, measured through another forward, or not measured at that batch."""
        return costs_note(self.costs, self.forward_name, batch) if _read_costs(policies) else None

    def memory_note_for(self, policies: list[str], read_gb_s: list[float], batch: int = 1) -> str | None:
        """What to tell a user of these policies when the memory read at `read_gb_s` over their run (engine/costs.py's
        memory_note): its speed far from the cost table's, said only where a policy priced trees from a table that
        otherwise holds (else costs_note_for says graver); its speed moving within the run, said for any."""
        priced = _read_costs(policies) and costs_note(self.costs, self.forward_name, batch) is None
        return memory_note(self.costs, read_gb_s, priced)

    def argmax_for(self, logits: torch.Tensor) -> Callable[[torch.Tensor, int], int]:
        """How greedy acceptance finds a row's argmax in these logits: in the native kernel where it runs and
        they are float32 or bf16 rows it reads (the same index, a fiftieth of torch's time), else torch's."""
        if (self._native_argmax and logits.dtype in (torch.float32, torch.bfloat16) and logits.device.type == "cpu"
                and logits.is_contiguous()):
            return native.argmax_row
        return row_argmax

    @cached_property
    def _native_argmax(self) -> bool:
        # SPECSCOPE_FORWARD=lean or plain: torch's ops throughout
        return forward_choice() == "native" and native.available()

    @property
    def forward_name(self) -> str:
        """Which forward verifies: "native", "lean" (engine/models/fastlm.py) or "plain" (Hugging Face's)."""
        return self.target.forward_name

    def validate(self, request: GenerationRequest) -> Prepared:
        """The one check of a request against this engine; a RequestError names the field at fault."""
        if not request.prompt.strip():
            raise RequestError("the prompt is empty", field="prompt")
        name = request.policy or self.default_policy
        cls, params = policy_class(name), policy_params(name, request.params)
        drafter = request.drafter or self.default_drafter
        if drafter not in self.drafters:
            raise RequestError(f"unknown drafter {drafter!r}; this engine has {', '.join(self.drafters)}",
                               field="drafter")
        prompt_ids = self.codec.encode_prompt(request.prompt)
        limit = self.target.max_length
        if len(prompt_ids) >= limit:
            raise RequestError(f"the prompt is {len(prompt_ids)} tokens; the model's context is {limit}",
                               field="prompt")
        if len(prompt_ids) + request.max_new_tokens > limit:
            raise RequestError(f"max_new_tokens {request.max_new_tokens} would exceed the model's context of "
                               f"{limit} tokens (the prompt takes {len(prompt_ids)})", field="max_new_tokens")
        if isinstance(request, WhatIfRequest):
            check_prefix(request.prefix, self.codec.vocab_size)
        return Prepared(request, cls, params, self.context, drafter if cls.drafts else None, prompt_ids)

    def run(self, request: GenerationRequest, emit: Emit | None = None,
            cancelled: Callable[[], bool] | None = None, detail: bool = True,
            memory: MemoryBank | None | Literal["engine"] = "engine") -> RunFinished:
        """Generates for one request. With `detail` off, per-candidate events (layers, tree,
        verify) are not built: the benchmark's setting, so bookkeeping does not cost speed.
        `memory`: the earlier requests the drafts may copy from, and where this one is remembered
        (the engine's own bank by default; None: none, and this run is not remembered)."""
        prepared = self.validate(request)
        with self._turn():
            return self._new_run(prepared, emit, cancelled, detail, bank=self.bank_for(memory)).execute()

    def bank_for(self, memory: MemoryBank | None | Literal["engine"]) -> MemoryBank | None:
        """The suffix memory a run's `memory` argument names: "engine" is the engine's own."""
        return self.memory if memory == "engine" else memory

    def what_if(self, request: WhatIfRequest, emit: Emit | None = None,
                cancelled: Callable[[], bool] | None = None) -> RunFinished:
        """Re-runs one step of a run, from the tokens it had emitted before, under the request's policy and
        parameters (engine/whatif.py): a run of its own that holds the model for one step; the original run
        is not touched. Drafter state learned during the run, an adaptive policy's state and, when sampling,
        the draws start fresh."""
        prepared = self.validate(request)
        with self._turn():
            return self._new_run(prepared, emit, cancelled, True, what_if=request).execute()

    @property
    def default_max_batch(self) -> int:
        """How many requests a server batches by default: the largest batch the cost table measured (its rows
        are what cast and talon-adaptive read in a batch); 1 where nothing was measured."""
        return max(self.costs.batches) if self.costs.measured else 1

    @contextmanager
    def _turn(self) -> Iterator[None]:
        """The model for one run: the engine's lock, torch's own small ops on one thread beside the native
        kernel's team (engine/models/device.py), and inference mode for every step (entered once: its
        functions' own `inference` then costs nothing)."""
        with self._lock, one_torch_thread(self.forward_name == "native"), torch.inference_mode():
            yield

    def _new_run(self, prepared: Prepared, emit: Emit | None, cancelled: Callable[[], bool] | None, detail: bool,
                 what_if: WhatIfRequest | None = None, bank: MemoryBank | None = None,
                 target: LanguageModel | None = None, drafter: Drafter | None = None) -> "_Run":
        """A run of one request: on the engine's own target and drafter, or (a batch's) on a session of each."""
        if drafter is None and prepared.drafter:
            drafter = self._drafter(prepared.drafter)
        reporter = RunReporter(emit or (lambda event: None), detail, self.codec, uuid.uuid4().hex[:12],
                               prepared.policy_class.name)
        return _Run(self, prepared, drafter, reporter, cancelled or (lambda: False), what_if=what_if, bank=bank,
                    target=target)

    def costs_summary(self, context: int) -> CostsSummary:
        """The cost table as read at `context`, for the run's opening event."""
        table = self.costs
        measured = table.select_context(context)
        return CostsSummary(source=table.target.source, context=measured, ns=list(table.ns),
                            target_ms=[table.verify_cost(n, measured) for n in table.ns],
                            draft_ms=[table.draft_cost(n, measured) for n in table.ns])

    def drafter_session(self, name: str) -> Drafter:
        """A drafter of this name with state of its own (its models shared with the engine's), for a batch."""
        return self._drafter(name).session()

    def _drafter(self, name: str) -> Drafter:
        """Drafters are built once (a draft LM's weights are shared) and restarted per run."""
        if name not in self._built:
            self._built[name] = self.drafters[name]()
        return self._built[name]


def memory_key(policy: Policy) -> str:
    """Whose earlier runs a run may draft from: the same policy with the same parameters (talon at μ 0.03 does
    not draft from talon at μ 0.1 on the same prompt, so a comparison of the two stays fair)."""
    return f"{policy.name}:{policy.params.model_dump_json()}"


@dataclass
class Drafted:
    """A step's first half, drafted and waiting for its verify forward: the tree, the draft's q at its
    sampled nodes, the target forward it asks for, and the drafting's clock."""

    tree: DraftTree
    dists: dict[int, torch.Tensor]  # node -> [V]
    verify: BatchItem  # the tree as one item of a (batched) target forward
    meter: tuple[int, float]  # the drafter's forwards and ms before this step
    started: float  # clock readings: the step began, drafting ended
    drafted: float


class _Run:
    """One request's generation: the state that lives from prefill to the last step.

    A step has two halves around the target's forward: `draft` grows the tree and says what to verify,
    `finish` walks the verified tree, commits, reports and tells the policy. `execute` runs the request
    alone (`step_alone`); a batch (engine/batch.py) drafts every run's step, verifies all in one forward
    and finishes each, through the same two halves.
    """

    def __init__(self, engine: SpecEngine, prepared: Prepared, drafter: Drafter | None, reporter: RunReporter,
                 cancelled: Callable[[], bool], what_if: WhatIfRequest | None = None,
                 bank: MemoryBank | None = None, target: LanguageModel | None = None):
        self.engine = engine
        self.target = target or engine.target  # a batch's run has a session of its own
        self.request = prepared.request
        self.policy = prepared.policy
        self.policy.explain = reporter.detail  # nobody reads the decisions' detail without per-candidate events
        self.prompt_ids = prepared.prompt_ids
        self.drafter = drafter
        self.reporter = reporter
        self.cancelled = cancelled
        self.generator = torch.Generator().manual_seed(self.request.seed)
        # A what-if starts mid-output: after the prefix its run had emitted, at the step it re-runs.
        self.what_if = what_if
        self.generated: list[int] = list(what_if.prefix) if what_if else []
        self.steps = what_if.step - 1 if what_if else 0
        self.prefix_len = len(self.generated)
        # The suffix memory this run drafts from and is remembered in (None: none); keyed by its policy.
        self.bank = bank if drafter is not None else None
        self.memory_key = memory_key(self.policy) if self.bank is not None else None
        self.root: int | None = None  # the next step's root: the last token emitted
        self.stop: str | None = None  # why generation stopped, once it has
        self.began = 0.0
        reporter.resume_after(self.generated)

    def execute(self) -> RunFinished:
        """The request alone, prefill to finish."""
        try:
            self.begin()
            while self.ready():
                self.step_alone()
            return self.finished()
        finally:
            self.release()

    def begin(self) -> None:
        """Reports the start and prefills."""
        self.began = clock(self.target.device)
        if self.bank is not None:
            self.drafter.use_memory(self.bank.for_policy(self.memory_key))
        self._report_started()
        self.root = self._prefill()

    def step_alone(self) -> None:
        """One step with its own target forward."""
        drafted = self.draft()
        out = drafted.verify.run_alone()
        self.finish(drafted, out, (clock(self.target.device) - drafted.drafted) * 1000)

    def finished(self) -> RunFinished:
        """The run's last event; then it leaves its suffix memory, remembered there."""
        result = self.reporter.finished(self.stop, clock(self.target.device) - self.began,
                                        self.generated[self.prefix_len:])
        self.release()
        if self.bank is not None:
            self.bank.remember(self.memory_key, self.prompt_ids, self.generated)
        return result

    def release(self) -> None:
        """Takes the suffix memory back from the drafter (which may draft for another run next)."""
        if self.bank is not None:
            self.drafter.use_memory(None)

    def ready(self) -> bool:
        """Whether the run takes another step: asked before each one, it stops the run where the client
        cancelled or a what-if's one step is done."""
        if self.stop is None and self.cancelled():
            self.stop = "cancelled"
        elif self.stop is None and self.what_if and self.steps == self.what_if.step:
            self.stop = "what_if"
        return self.stop is None

    @property
    def feature_layers(self) -> tuple[int, ...]:
        return self.drafter.feature_layers if self.drafter else ()

    def _prefill(self) -> int:
        """Runs the context (the prompt, and a what-if's prefix) but its last token, which becomes the first root."""
        self.target.reset()
        self.policy.start_run()
        context = self.prompt_ids + self.generated
        features = None
        if len(context) > 1:
            out = self.target.forward_chain(context[:-1], hidden_layers=self.feature_layers, logits=False)
            features = torch.cat(out.hidden, dim=-1) if out.hidden else None  # [C-1, F]
        if self.drafter:
            self.drafter.start(list(context), features)
        return context[-1]

    def draft(self) -> Drafted:
        """The step's first half: grows and reranks the tree, and says which forward verifies it."""
        return run_growing(self.drafting())

    def drafting(self) -> Generator[DraftForward, None, Drafted]:
        """`draft`, handing out each draft forward before it runs (grow_layers): a batch runs its requests'
        forwards together, and their trees grow in step."""
        self.steps += 1
        device = self.target.device
        meter = self.drafter.meter.reading() if self.drafter else (0, 0.0)
        started = clock(device)
        tree, dists = yield from self._draft(self.root)
        drafted = clock(device)
        return Drafted(tree, dists, self._verify_item(tree), meter, started, drafted)

    def finish(self, drafted: Drafted, out: ForwardOutput, verify_ms: float, shared: int = 1) -> None:
        """The step's second half, given the target's forward over the tree (`verify_ms` its time, over the
        trees of `shared` requests): accept → commit → report; sets the next root, and `stop` where generation
        ends."""
        device = self.target.device
        verified = clock(device)
        tree = drafted.tree
        features = torch.cat(out.hidden, dim=-1) if out.hidden else None  # [T, F]
        accepted, probs = self._accept(tree, out, drafted.dists)
        emitted = [tree.token[i] for i in accepted.path[1:]] + [accepted.token]
        self._commit(tree, accepted, emitted, features)
        kept, stop = self._truncate(emitted)
        self.generated.extend(kept)
        result = VerifiedStep(self.steps, tree, accepted, kept, self.generated, probs, drafted.dists)
        self.reporter.verified(result, final=stop is not None)
        forwards_now, forward_ms_now = self.drafter.meter.reading() if self.drafter else (0, 0.0)
        forwards, forward_ms = drafted.meter
        times = Timings(draft_ms=(drafted.drafted - drafted.started) * 1000, draft_forward_ms=forward_ms_now - forward_ms,
                        verify_ms=verify_ms, other_ms=(clock(device) - verified) * 1000)
        adjustments = self.policy.observe(StepOutcome(tree_size=len(tree) - 1, depth=tree.max_depth,
                                                      accepted=len(accepted.path) - 1, times=times,
                                                      prefix_len=self.target.cache_len))
        self.reporter.step_done(result, forwards_now - forwards, times, adjustments, shared)
        self.root, self.stop = accepted.token, stop

    def _draft(self, root: int) -> Generator[DraftForward, None, tuple[DraftTree, dict[int, torch.Tensor]]]:
        """Grows the tree, then lets the policy rerank it to the nodes sent to verification."""
        if not self.drafter:
            return DraftTree.with_root(root), {}
        growing: Growing = grow_layers(self.policy, self.drafter, root, self._depth_room(), self.target.cache_len,
                                       self.request.sampling, self.generator)
        draft: Draft = yield from growing
        rerank = self.policy.finalize(draft.tree)
        kept = set(rerank.keep)
        assert all(node in kept for node in range(len(draft.tree)) if draft.tree.sampled[node]), \
            f"{self.policy.name} reranked away a sampled node: sampled siblings are lossless only if all are verified"
        verified = draft.tree.subset(rerank.keep)
        self.reporter.drafted(self.steps, draft, rerank, verified)
        new_index = {old: new for new, old in enumerate(sorted(rerank.keep))}
        return verified, {new_index[node]: dist for node, dist in draft.dists.items() if node in new_index}

    def _depth_room(self) -> int:
        """Deeper drafts could not be emitted: past max-new-tokens or the context."""
        left = self.request.max_new_tokens - len(self.generated) - 1
        context_left = self.target.max_length - self.target.cache_len - 1
        return max(0, min(left, context_left))

    def _verify_item(self, tree: DraftTree) -> BatchItem:
        """The target forward over every node: a path (one node, or a chain's drafts) as a causal chain, which
        sees exactly what its tree mask would let it see (so the same logits, bit for bit, in the kernel and
        in torch's lean forward) without building that mask; any other tree under its mask."""
        if tree.is_path:
            return BatchItem(self.target, tree.token, hidden_layers=self.feature_layers)
        prefix = self.target.cache_len
        allowed = tree_attention_allowed(tree.parent, prefix)  # [T, P + T]
        return BatchItem(self.target, tree.token, position_ids(tree.depth, prefix), allowed, self.feature_layers)

    def _accept(self, tree: DraftTree, out: ForwardOutput, dists: dict[int, torch.Tensor]
                ) -> tuple[Acceptance, Callable[[int], torch.Tensor]]:
        """The acceptance walk, and the target's distribution at a node as the walk read it (for the report).
        A greedy walk that reports no odds reads its argmaxes off the kernel's bf16 logits where it has them
        (the same indices: widening is exact), so they are never widened."""
        if self.request.sampling.greedy:
            detail = self.reporter.detail
            logits = out.narrow if out.narrow is not None and not detail else out.logits
            return (accept_greedy(tree, logits, odds=detail, argmax=self.engine.argmax_for(logits)),
                    lambda node: torch.softmax(out.logits[node].double(), dim=-1))
        probs = probs_from_logits(out.logits, self.request.sampling)  # [T, V]
        return accept_sampled(tree, probs, dists, self.generator), lambda node: probs[node]

    def _commit(self, tree: DraftTree, accepted: Acceptance, emitted: list[int], features: torch.Tensor | None) -> None:
        """Keeps the accepted path in the target's cache and brings the drafter along."""
        prefix = self.target.cache_len - len(tree)
        self.target.keep(list(range(prefix)) + [prefix + node for node in accepted.path])
        if self.drafter:
            path_features = None if features is None else _rows(features, accepted.path)  # [A, F]
            self.drafter.commit(tree, accepted.path, emitted, path_features)

    def _truncate(self, emitted: list[int]) -> tuple[list[int], str | None]:
        """Cuts a step's tokens where plain decoding would have stopped."""
        room = self.request.max_new_tokens - len(self.generated)
        for i, token in enumerate(emitted[:room]):
            if token in self.engine.codec.eos_ids:
                return emitted[:i + 1], "eos"
        kept = emitted[:room]
        return kept, "max_new_tokens" if len(self.generated) + len(kept) >= self.request.max_new_tokens else None

    def _report_started(self) -> None:
        request, info = self.request, self.engine.describe()
        self.reporter.started(
            prompt=request.prompt, prompt_tokens=len(self.prompt_ids), params=self.policy.params.model_dump(),
            drafter=self.drafter.name if self.drafter else "none", target=info.target,
            draft=self.drafter.model_name if self.drafter else None, device=info.device, dtype=info.dtype,
            seed=request.seed, temperature=request.temperature, top_k=request.top_k, top_p=request.top_p,
            max_new_tokens=request.max_new_tokens, costs=self.engine.costs_summary(len(self.prompt_ids)),
            what_if_step=self.what_if.step if self.what_if else None)


def _rows(x: torch.Tensor, path: list[int]) -> torch.Tensor:
    """x's rows on an accepted path (increasing node indices from the root): a view where the path is the
    tree's first nodes (a chain's always is), a copy otherwise.

    >>> x = torch.arange(4)
    >>> _rows(x, [0, 1, 2]).data_ptr() == x.data_ptr(), _rows(x, [0, 2]).tolist()
    (True, [0, 2])
    """
    return x[:len(path)] if path[-1] == len(path) - 1 else x[path]


def _read_costs(policies: list[str]) -> bool:
    """Whether any of these policies sizes its trees from the cost table (chain, cast, talon-adaptive)."""
    return any(POLICIES[name].needs_costs for name in policies if name in POLICIES)
