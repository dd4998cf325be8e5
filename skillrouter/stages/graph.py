"""A grid as a graph of stages, every key known before anything is built.

A :class:`Stage` declares what it is — its kind (the cache folder; :mod:`.kinds` lists the config keys
each kind reads), the values of those keys it depends on (``params``), its input stages, the files it reads from outside the cache, its resource class
(``gpu``, ``cpu``, ``llm``, ``agent``: agent trials in containers) and its build function — and nothing it computes. Its key is Merkle: a hash
of its kind, version, code, params, its inputs' keys and its files' content fingerprints, so the keys
of a whole grid follow from the configs alone, and two cells that agree upstream share the stage.

``options`` carry what a build needs but what does not define its artifact (a user file's path, keyed
by content instead; batch sizes; an LLM server's address): they never enter the key.

``cheap`` stages (a few seconds: loading a parsed dataset, reordering by scores already computed,
a cell's scoring) never get a job of their own on a cluster: they run inside the job of the stage
they feed or follow. ``after`` stages are built first but are not part of the identity (the shards a
pool embedding is merged from: sharding is how it is computed, not what it is). A stage without a
build function is a cell's scoring sink: it writes a run directory, not a cache entry.
"""
from __future__ import annotations

import functools
import json
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterable, Iterator, Mapping, Union

from ..cache.store import StageCache, code_fingerprint, files_fingerprint, stage_key
from ..data.columnar import read_dataset
from ..data.types import Dataset
from .kinds import KINDS

RESOURCES = ("gpu", "cpu", "llm", "agent")


@functools.lru_cache(maxsize=4096)
def _spec_dict(spec: Any) -> dict[str, Any]:
    return asdict(spec)


def spec_dict(spec: Any) -> dict[str, Any]:
    """``dataclasses.asdict`` of a frozen spec (an encoder, a text rendering, a training config), made once per
    distinct spec: a grid builds the same specs in every cell. Shared: read it, never change it."""
    try:
        return _spec_dict(spec)
    except TypeError:  # not hashable
        return asdict(spec)


@dataclass(frozen=True)
class FileInput:
    """Files a stage reads from outside the cache (a user's pool, a release folder), keyed by content."""

    paths: tuple[str, ...]
    fingerprint: str

    @classmethod
    def of(cls, paths: Iterable[str | Path]) -> FileInput:
        paths = tuple(str(p) for p in paths)
        return cls(paths, files_fingerprint(paths))


@dataclass(frozen=True)
class Items:
    """How much work a stage does, read from an input's manifest (``field``), times a param when set:
    what a cost estimate scales an earlier build's seconds per item by."""

    role: str
    field: str
    times: str | None = None  # a dotted params key, e.g. "train.epochs"


@dataclass(frozen=True, eq=False)
class Stage:
    """One node of the graph. ``params`` must be plain JSON data; ``build(ctx)`` writes the artifact
    into ``ctx.out`` and may return extra manifest fields (``items``: the work units it did, for
    cost estimates)."""

    kind: str
    build: Callable[[BuildContext], dict[str, Any] | None] | None
    params: Mapping[str, Any]
    inputs: Mapping[str, Stage] = field(default_factory=dict)
    files: Mapping[str, FileInput] = field(default_factory=dict)
    resource: str = "cpu"
    cheap: bool = False
    resumable: bool = False
    version: int = 1
    code: tuple[str, ...] = ()  # dotted names of the modules whose source defines the artifact (besides build's)
    after: tuple[Stage, ...] = ()
    options: Mapping[str, Any] = field(default_factory=dict)
    items: Items | None = None
    counts: Callable[[Stage, StageCache], dict[str, float]] | None = None  # what a plan counts of its work beyond items
    key: str = field(init=False)
    modules: tuple[str, ...] = field(init=False)  # the modules whose source defines the artifact (build's among them)...
    fingerprint: str = field(init=False)          # ...and their hash: what a run records of the code that made it

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise ValueError(f"stage kind {self.kind!r} is not declared in skillrouter.stages.kinds")
        if self.resource not in RESOURCES:
            raise ValueError(f"stage {self.kind}: resource must be one of {RESOURCES}, got {self.resource!r}")
        modules = tuple(self.code) + ((self.build.__module__,) if self.build else ())
        identity = {**{role: s.key for role, s in self.inputs.items()},
                    **{f"file:{role}": f.fingerprint for role, f in self.files.items()}}
        fingerprint = code_fingerprint(modules)
        key = stage_key(self.kind, self.version, fingerprint, json.loads(json.dumps(self.params)), identity)
        object.__setattr__(self, "key", key)
        object.__setattr__(self, "modules", modules)
        object.__setattr__(self, "fingerprint", fingerprint)
        object.__setattr__(self, "code", ())  # folded into the key

    @property
    def reads(self) -> tuple[str, ...]:
        """The config keys whose values can change this stage's artifact."""
        return KINDS[self.kind].reads

    @property
    def virtual(self) -> bool:
        """A cell's scoring: it writes a run directory, never a cache entry."""
        return self.build is None

    @property
    def llm_server(self) -> bool:
        """Whether building it needs the grid's LLM server: a generation stage, or an agent of that LLM (an
        LLM judge calls its own endpoint)."""
        return (self.resource == "llm" and self.kind != "rerank") or bool(self.options.get("llm_server"))

    @property
    def label(self) -> str:
        return f"{self.kind} {self.key[:8]}"

    def upstream(self) -> Iterator[Stage]:
        """Direct dependencies: identity inputs, then build-first stages."""
        yield from self.inputs.values()
        yield from self.after

    def manifest_fields(self) -> dict[str, Any]:
        """What the key was made of, recorded in the entry's manifest."""
        return {"params": self.params, "inputs": {role: s.key for role, s in self.inputs.items()},
                "input_files": {role: {"paths": list(f.paths), "fingerprint": f.fingerprint} for role, f in self.files.items()}}


@dataclass(frozen=True)
class StageFile:
    """A file inside an upstream stage's artifact (the built-in pool, a generated pairs file)."""

    stage: Stage
    name: str


FileRef = Union[str, StageFile]


def file_inputs(refs: Mapping[str, FileRef | None]) -> tuple[dict[str, Stage], dict[str, FileInput], dict[str, str], dict[str, str]]:
    """Split named file references into ``(inputs, files, names, paths)``: a stage's file joins its
    inputs (keyed by that stage, ``names`` says which file: part of the params), a user's file is
    fingerprinted (its ``paths``: options, since content, not location, defines what is read)."""
    inputs, files, names, paths = {}, {}, {}, {}
    for role, ref in refs.items():
        if isinstance(ref, StageFile):
            inputs[role], names[role] = ref.stage, ref.name
        elif ref:
            files[role], paths[role] = FileInput.of([ref]), str(ref)
    return inputs, files, names, paths


def walk(sinks: Iterable[Stage]) -> list[Stage]:
    """Every stage the sinks depend on, deduplicated by key, inputs before the stages that read them."""
    order: list[Stage] = []
    seen: set[str] = set()

    def visit(stage: Stage) -> None:
        if stage.key in seen:
            return
        for up in stage.upstream():
            visit(up)
        seen.add(stage.key)
        order.append(stage)

    for sink in sinks:
        visit(sink)
    return order


def needed_stages(sinks: Iterable[Stage], complete: Callable[[Stage], bool]) -> list[Stage]:
    """What building ``sinks`` takes, inputs first: the sinks (but a cell's virtual scoring), every stage
    they read, and the inputs of each needed stage that is not ``complete`` (a stage in the cache needs
    nothing above it)."""
    sinks = list(sinks)
    needed: set[str] = set()
    stack = list(sinks)
    while stack:
        stage = stack.pop()
        if stage.key in needed:
            continue
        needed.add(stage.key)
        if stage.virtual or not complete(stage):
            stack.extend(stage.upstream())
    return [s for s in walk(sinks) if s.key in needed and not s.virtual]


@functools.lru_cache(maxsize=8)
def dataset_at(entry: str) -> Dataset:
    """The dataset of a ``load_data`` entry. Published entries never change: one read per process however
    many stages and cells read it, so the object is shared: read it, never change it."""
    return read_dataset(Path(entry))


@dataclass
class BuildContext:
    """What a stage's build function gets: where to write, and its inputs' artifacts."""

    stage: Stage
    cache: StageCache
    out: Path
    work: Path | None = None
    progress: bool = True

    @property
    def params(self) -> Mapping[str, Any]:
        return self.stage.params

    def has(self, role: str) -> bool:
        return role in self.stage.inputs

    def input(self, role: str) -> Path:
        """The artifact folder of the input stage in ``role``."""
        up = self.stage.inputs[role]
        return self.cache.entry(up.kind, up.key)

    def manifest(self, role: str) -> dict[str, Any]:
        up = self.stage.inputs[role]
        return self.cache.manifest(up.kind, up.key)

    def dataset(self, role: str = "data") -> Dataset:
        return dataset_at(str(self.input(role)))

    def file(self, role: str) -> str | None:
        """The path of a file reference made by :func:`file_inputs` (None when the role is unset)."""
        if role in self.stage.inputs:
            return str(self.input(role) / self.stage.params["files"][role])
        return self.stage.options.get("paths", {}).get(role)
