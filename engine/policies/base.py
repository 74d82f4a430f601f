"""The policy interface: candidates in, a selection and one decision per candidate out.

A step grows the tree layer by layer. For each layer the engine asks the
drafter for the children of the frontier, pools them as a `Pool`, and hands the
pool to `Policy.select_layer`, which decides for every candidate whether it
joins the tree (kept), whether it is grown further (expanded), and why. When
no frontier is left, `Policy.finalize` may rerank the tree down to the nodes
sent to verification. Policies never call a model; they may keep state
across steps of one run (reset by `start_run`) and learn from `observe`.
What a policy may know of the machine comes in a `PolicyContext`: the
measured (or assumed) cost table.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from typing import ClassVar

from pydantic import BaseModel, ConfigDict

from engine.costs import CostTable
from engine.timing import Timings
from engine.tree import DraftTree


class PolicyParams(BaseModel):
    model_config = ConfigDict(extra="forbid")


@dataclass(frozen=True)
class PolicyContext:
    """What the engine tells a policy about the machine it runs on."""

    costs: CostTable = field(default_factory=CostTable.assumed)  # forward times in ms; see engine/costs.py


@dataclass
class Pool:
    """All candidates of one layer: children proposed for the frontier, flat."""

    depth: int
    parent: list[int]  # tree index of each candidate's parent
    token: list[int]
    q: list[float]  # draft probability given the parent
    score: list[float]  # cumulative path score: score[parent] * q
    source: list[str]
    sampled: list[bool]
    grows_free: list[bool]  # growing the candidate (drafting its children) takes no model forward
    prefix_len: int = 0  # tokens already in the target's cache (context length)

    def __len__(self) -> int:
        return len(self.token)


@dataclass
class Decision:
    kept: bool
    expanded: bool
    reason: str
    threshold: float | None = None
    detail: dict[str, float] = field(default_factory=dict)


@dataclass
class LayerSelection:
    decisions: list[Decision]  # one per pool candidate, same order
    threshold: float | None = None
    anchor: float | None = None


@dataclass
class Rerank:
    keep: list[int]  # ancestor-closed tree indices sent to verification, root included
    pruned: dict[int, Decision] = field(default_factory=dict)  # tree index -> why it was dropped


@dataclass
class StepOutcome:
    """What a policy may learn from after a step."""

    tree_size: int
    depth: int
    accepted: int
    times: Timings
    prefix_len: int


class Adjustment(BaseModel):
    """A parameter a policy moved after observing a step, and why: the policy_adjusted event carries it."""

    param: str
    old: float
    new: float
    why: str


class Policy(ABC):
    name: ClassVar[str]
    description: ClassVar[str]  # one line for pickers and docs: what the policy does
    Params: ClassVar[type[PolicyParams]]
    drafts: ClassVar[bool] = True  # False only for the no-draft baseline
    needs_costs: ClassVar[bool] = False  # reads the cost table: its output says whether the costs were measured
    # How a page presents it (served with its schema, engine.policies.policy_schemas):
    title: ClassVar[str]  # its name in words, as the papers write it
    reranks: ClassVar[bool] = False  # every step ends in a rerank of the drafted tree (a phase of its own)
    symbols: ClassVar[dict[str, str]] = {}  # the papers' symbol of each main parameter -> the parameter

    def __init__(self, params: PolicyParams, context: PolicyContext | None = None):
        self.params = params
        self.context = context or PolicyContext()
        self.batch = 1  # requests sharing this step's verify forward (see_batch)
        # Whether a run reads each decision's `detail`, the pruned candidates and the reasons of the nodes a
        # rerank drops (a run with per-candidate events: the page's, a trace's); the engine says so before the
        # run. Without it a policy may leave them out and the draft loop pools only what passes `pool_floor`
        # (engine/drafting.py): the same kept / expanded / keep, less bookkeeping a step (a bench's runs).
        self.explain = True

    @property
    def costs(self) -> CostTable:
        return self.context.costs

    def start_run(self) -> None:
        """Resets per-run state."""

    def see_batch(self, size: int) -> None:
        """How many requests share the coming step's verify forward: engine/batch.py says so before every
        step (a run alone is a batch of 1). A cost-aware policy reads the cost table's rows at it."""
        self.batch = size

    @abstractmethod
    def children_per_node(self, tree: DraftTree, depth: int) -> int:
        """How many children the drafter should propose for each frontier node of the layer at `depth`,
        given the tree grown so far (a budgeted policy asks for no more than it could keep)."""

    def line_ahead(self) -> int:
        """How many layers below the root this step may grow as one line, each the drafter's best child of the
        node above (a chain's γ − 1; talon-adaptive's N − 1 where its root keeps one child; 0: a tree, whose
        shape each layer decides). A drafter may run them in the root's forward; a layer whose node is not the
        one it ran drafts as ever, so the tree is the same."""
        return 0

    def drafts_from_model(self, depth: int, prefix_len: int) -> bool:
        """Whether layer `depth` takes the drafter's ordinary proposals, the target holding `prefix_len` tokens;
        False: only its free ones (`Drafter.free_proposals`, a model-free match's continuation, which costs no
        draft forward). Asked first at each layer, before `children_per_node`."""
        return True

    def sample_children(self, temperature: float) -> bool:
        """Whether children are drawn from the draft distribution rather than taken as its top-k.

        Sampled siblings are drawn without replacement and verified in draw order
        (engine/acceptance.py); that is lossless only if every child drawn reaches
        verification. A sampling policy therefore keeps every sampled candidate it is
        given and never reranks one away: choosing among draws by their probability
        would condition what was drawn. `grow_tree` and the engine refuse a policy that does.
        """
        return False

    @abstractmethod
    def select_layer(self, tree: DraftTree, pool: Pool) -> LayerSelection:
        """Decides on every candidate of the pool."""

    def pool_floor(self, depth: int) -> float | None:
        """A fraction φ such that, at layer `depth`, every candidate whose path score is below φ × the best
        path score of the layer's pool is pruned whatever else the pool holds, and leaving it out of the pool
        changes no other decision; None: no such bound. Where no one reads the pruned candidates (a run
        without per-candidate events) the draft loop pools only those at or above it (engine/drafting.py)."""
        return None

    def finalize(self, tree: DraftTree) -> Rerank:
        """The nodes sent to verification; by default the whole tree."""
        return Rerank(keep=list(range(len(tree))))

    def observe(self, outcome: StepOutcome) -> list[Adjustment]:
        """Learns from a finished step; returns any parameter changes it made."""
        return []


def top_indices(values: list[float], k: int) -> list[int]:
    """Indices of the k largest values, ties broken by lower index (stable and deterministic).

    >>> top_indices([0.1, 0.5, 0.5, 0.2], 2)
    [1, 2]
    """
    # A stable sort keeps equal values in index order, also reversed: the same order as the key (−v, i), without
    # a tuple per candidate (a gated layer pools hundreds).
    order = sorted(range(len(values)), key=values.__getitem__, reverse=True)
    return order[:max(k, 0)]


def rerank_top(tree: DraftTree, m: int) -> Rerank:
    """Keeps the root and the m draft nodes of highest path score, ancestor-closed.

    Scores never grow along a path, so the best m are ancestor-closed up to
    ties; ties are broken towards earlier (shallower) nodes, which keeps closure.
    """
    drafted = list(range(1, len(tree)))
    best = set(sorted(drafted, key=lambda i: (-tree.score[i], tree.depth[i], i))[:m])
    keep = [0] + [i for i in drafted if i in best and ancestors_in(tree, i, best)]
    kept = set(keep)
    # One record for every node dropped (an EAGLE tree drops some 550 of 610): nothing edits it afterwards.
    pruned = dict.fromkeys((i for i in drafted if i not in kept), Decision(kept=False, expanded=False, reason="rerank"))
    return Rerank(keep=keep, pruned=pruned)


def ancestors_in(tree: DraftTree, node: int, chosen: set[int]) -> bool:
    """Whether every draft ancestor of `node` is in `chosen` (the root always is)."""
    parent = tree.parent[node]
    while parent > 0:
        if parent not in chosen:
            return False
        parent = tree.parent[parent]
    return True
