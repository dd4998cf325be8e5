"""The built-in benchmark: a seeded, synthetic skill-routing dataset written in our own words.

Why it looks the way it does: the field's central finding is that the skill *body* carries the
routing signal. So skills come in *families* (one technology x one domain) of siblings that share
a name stem and an identical description and differ only in the body, which says which operation
the skill performs on which object: siblings pair two operations with two objects, so neither the operation
nor the object alone tells a sibling apart. Queries name the technology, the operation and the object, mostly
in paraphrase (synonyms the bodies never use), so ``fields=nd`` can find the family but cannot tell the siblings
apart, while ``fields=all`` can when it reads the paraphrase right, which leaves a trained stage something to learn.

Also produced: multi-skill queries, graded labels (GT 3, same-family sibling 1), SKIP partners,
Hard-tier distractors — per evaluated skill a *twin* only its body separates from the GT (the family's name stem and
description, the same operation on another object), and the generic ones (same domain / same technology /
over-general) —, Oracle-ND descriptions for the evaluated skills (what a skill does, not what it does it to: an
oracle description narrows the family to an operation, the body to the skill), and training pairs on the siblings
of *training families* (one more technology per domain) that no query touches. Training on siblings of the
evaluated families taught a reranker their names: every top-20 held the trained siblings, ranked above the GT (a
pointwise reranker put them first in 46 of 60 queries, Hit@1 0.03, below chance); on families of their own the
pairs teach what transfers — the operations' and objects' paraphrases, the templates, the skill format. And dev
queries (``dev_queries``) of the benchmark's kind — its templates, paraphrase and all — on *dev families* (a
technology of their own per domain, in the pool, in no training pair): a dev split as hard as the test, where one
carved from the training pairs (their own templates, their skills' siblings trained on) is far easier and can choose
nothing (a fusion weight's dev curve was flat at every α). And a training pool (``train_pool``) of its own: the
training and dev families with the generic distractors a real pool has (an overview of the domain, a tool's setup
guide: what the Hard tier adds for the evaluated families) for each training family. A reranker trained on the
benchmark's pool, with negatives among the training positives only, never met a generic skill: on the Hard tier two
thirds of its wrong top-1s were the domain overview or the tool's setup guide, which name the query's objects in its
own paraphrase. The pool holds no evaluated skill, so training may label any of its candidates a negative.

    python -m skillrouter.data.builtin --out DIR [--seed 0]
"""
from __future__ import annotations

import argparse
import random
from dataclasses import dataclass
from pathlib import Path

from .jsonl import atomic_write_jsonl

DOMAINS: dict[str, tuple[list[str], list[tuple[str, str]]]] = {
    # domain: (technologies, [(object, synonym)])
    "spreadsheet": (["excel", "csv", "sheets", "libreoffice", "airtable"], [("worksheets", "tabs"), ("pivot tables", "summary grids"),
                                                ("cell formulas", "calculations"), ("invoices", "bills")]),
    "database": (["postgres", "sqlite", "mongodb", "mysql", "duckdb"], [("tables", "relations"), ("query logs", "statement history"),
                                                    ("indexes", "lookup structures"), ("migrations", "schema changes")]),
    "scraping": (["playwright", "scrapy", "httpx", "beautifulsoup", "selenium"], [("product pages", "shop listings"), ("sitemaps", "url lists"),
                                                    ("cookies", "session tokens"), ("html tables", "markup grids")]),
    "imaging": (["pillow", "opencv", "imagemagick", "gimp", "krita"], [("photos", "pictures"), ("thumbnails", "preview images"),
                                                     ("scanned receipts", "paper slips"), ("sprites", "icon sheets")]),
    "audio": (["ffmpeg", "whisper", "sox", "audacity", "librosa"], [("podcasts", "episodes"), ("voice memos", "recordings"),
                                            ("music stems", "instrument tracks"), ("subtitles", "captions")]),
    "deployment": (["docker", "kubernetes", "terraform", "ansible", "helm"], [("containers", "images"), ("manifests", "descriptors"),
                                                          ("secrets", "credentials"), ("clusters", "node groups")]),
    "documents": (["markdown", "latex", "pandoc", "asciidoc", "typst"], [("reports", "write-ups"), ("bibliographies", "reference lists"),
                                                   ("slides", "presentations"), ("manuscripts", "drafts")]),
    "messaging": (["slack", "email", "telegram", "discord", "matrix"], [("threads", "conversations"), ("attachments", "enclosures"),
                                                  ("mailing lists", "subscriber groups"), ("notifications", "alerts")]),
}

# verb, synonym phrase, the body's step that makes the operation concrete
OPERATIONS: list[tuple[str, str, str]] = [
    ("deduplicate", "remove repeated", "Group near-identical {obj} by a normalised key and keep only the newest copy."),
    ("validate", "check the correctness of", "Compare every field of the {obj} against a schema and list each violation."),
    ("compress", "shrink the size of", "Re-encode the {obj} with a lossless codec and report the bytes saved."),
    ("encrypt", "lock with a key", "Seal the {obj} with an authenticated cipher and store the key separately."),
    ("visualize", "draw charts of", "Plot the {obj} as a timeline and a histogram and save both figures."),
    ("schedule", "run on a timer", "Register a recurring job that processes the {obj} every night at two."),
    ("translate", "change the language of", "Detect the language of the {obj} and render them in the requested one."),
    ("summarize", "write a short digest of", "Read the {obj} and produce a five-bullet digest with key numbers."),
    ("anonymize", "mask personal data in", "Replace names, emails and phone numbers in the {obj} with stable pseudonyms."),
    ("merge", "combine several", "Join the {obj} on their shared identifier and resolve conflicting values."),
    ("archive", "back up", "Bundle the {obj} into a dated archive and verify its checksum after writing."),
    ("benchmark", "measure the speed of", "Time repeated runs over the {obj} and report the median and the spread."),
]

SUFFIXES = ["toolkit", "helper", "kit", "assistant", "utils", "workbench", "suite", "studio"]
# Most benchmark queries paraphrase (synonyms the bodies never use): lexical overlap alone is not
# enough, and the training pairs, written the same way about *other* skills, teach the mapping.
EVAL_TEMPLATES = [
    "I need to {verb} the {obj} in our {tech} {domain} setup.",
    "Can you help me {syn} {osyn} with {tech}?",
    "How do I {syn} the {osyn} for a {tech} project?",
]
TRAIN_TEMPLATES = [
    "Please {syn} the {obj} that live in {tech}.",
    "Our team wants to {verb} {osyn} using {tech} for {domain} work.",
    "What is the best way to {verb} {obj} in {tech}?",
    "Help me {syn} our {osyn} in {tech}.",
]
MULTI_TEMPLATE = "First {verb} the {obj} in {tech} {domain}, then {verb2} the {obj2} with {tech2}."
FILES = ("pool", "queries", "distractors", "oracle_nd", "train_pairs", "dev_queries", "train_pool")
FILLER = [
    "Prefer small, reversible steps and keep a log of every change.",
    "Ask before overwriting files that already exist.",
    "Print a short summary when the work is done.",
    "Fail loudly with a clear message when an input is missing.",
]


@dataclass(frozen=True)
class _Sibling:
    id: str
    name: str
    domain: str
    tech: str
    verb: str
    syn: str
    detail: str
    obj: str
    osyn: str

    def phrase(self, template: str) -> str:
        return template.format(verb=self.verb, syn=self.syn, obj=self.obj, osyn=self.osyn, tech=self.tech, domain=self.domain)


def _body(s: _Sibling, rng: random.Random) -> str:
    return (
        f"# {s.name}\n\n## When to use\nUse this skill to {s.verb} {s.obj} in {s.tech} {s.domain} work.\n\n## Steps\n1. Load the {s.obj} from the {s.tech} source.\n"
        f"2. {s.detail.format(obj=s.obj)}\n3. Check the result and report what changed.\n\n## Notes\n"
        f"- {rng.choice(FILLER)}\n"
    )


def _family(tech: str, domain: str, objects: list[tuple[str, str]], siblings: int, rng: random.Random) -> list[_Sibling]:
    """``siblings`` skills of one technology and domain: operations x two objects, interleaved so that any two
    consecutive siblings differ in both and every operation and object is shared with another sibling."""
    ops = rng.sample(OPERATIONS, (siblings + 1) // 2)
    objs = rng.sample(objects, 2)
    grid = [(0, 0), (1, 1), (0, 1), (1, 0)] + [(i // 2, i % 2) for i in range(4, 2 * len(ops))]
    cells = [(o, b) for o, b in grid if o < len(ops)][:siblings]
    suffixes = rng.sample(SUFFIXES, siblings)
    return [_Sibling(f"builtin/{domain}/{tech}-{domain}-{suffix}", f"{tech}-{domain}-{suffix}", domain, tech,
                     *ops[o], *objs[b]) for (o, b), suffix in zip(cells, suffixes)]


def _description(s: _Sibling) -> str:
    return f"Practical {s.tech} utilities for {s.domain} work. Use when a task involves {s.tech}."


def _record(s: _Sibling, rng: random.Random, source: str = "builtin") -> dict[str, str]:
    return {"id": s.id, "name": s.name, "description": _description(s), "body": _body(s, rng), "category": s.domain,
            "source": source}


def _generic(s: _Sibling, source: str, rng: random.Random) -> list[dict[str, str]]:
    """The generic skills of ``s``'s family: its domain's overview and its tool's setup guide. Each names the
    family's objects, in the queries' paraphrase too, and performs none of its operations."""
    verb, syn, _ = rng.choice(OPERATIONS)
    return [
        {"id": f"{source}/{s.domain}/{s.domain}-{s.tech}-overview", "name": f"{s.domain}-overview",
         "description": f"Guidance for {s.domain} tasks of every kind.",
         "body": f"# {s.domain} overview\nGeneral advice to {verb} or {syn} anything in {s.domain} work, "
                 f"including {s.obj} and {s.osyn}. Covers no specific tool.\n", "category": s.domain, "source": source},
        {"id": f"{source}/{s.tech}/{s.tech}-setup", "name": f"{s.tech}-setup",
         "description": f"Install and configure {s.tech}.",
         "body": f"# {s.tech} setup\nInstall {s.tech}, configure credentials and paths for {s.domain} {s.obj}, "
                 f"then run a smoke test. Does not {s.verb} anything.\n", "category": s.domain, "source": source},
    ]


def generate(out_dir: str | Path, seed: int = 0, n_domains: int = 8, techs_per_domain: int = 3,
             siblings: int = 4, eval_siblings: int = 2, n_multi: int = 12, train_techs: int = 1,
             train_templates: int = len(TRAIN_TEMPLATES), dev_techs: int = 1) -> dict[str, Path]:
    """Write pool/queries/distractors/oracle_nd/train_pairs/dev_queries/train_pool JSONL files under ``out_dir``:
    ``techs_per_domain`` evaluated families per domain (their first ``eval_siblings`` siblings queried),
    ``train_techs`` training families per domain (every sibling a training positive in ``train_templates`` wordings,
    none ever a query's label or in its family) and ``dev_techs`` dev families per domain (every sibling queried with
    the benchmark's templates, and multi-skill queries as its, in ``dev_queries``); ``train_pool``: the training and
    dev families, and each training family's generic skills."""
    if not 0 < eval_siblings <= siblings or siblings + eval_siblings > len(SUFFIXES):
        raise ValueError(f"need 0 < eval_siblings <= siblings and siblings + eval_siblings <= {len(SUFFIXES)}")
    if techs_per_domain + train_techs + dev_techs > min(len(t) for t, _ in DOMAINS.values()):
        raise ValueError("techs_per_domain + train_techs + dev_techs exceeds the technologies of a domain")
    rng = random.Random(seed)
    out = Path(out_dir)
    families: list[list[_Sibling]] = []
    training_families: list[list[_Sibling]] = []
    dev_families: list[list[_Sibling]] = []
    for domain in list(DOMAINS)[:n_domains]:
        techs, objects = DOMAINS[domain]
        for n, tech in enumerate(techs[:techs_per_domain + train_techs + dev_techs]):
            kind = families if n < techs_per_domain else training_families if n < techs_per_domain + train_techs \
                else dev_families
            kind.append(_family(tech, domain, objects, siblings, rng))

    pool, oracle, queries, train, dev = [], [], [], [], []
    for fam in families + training_families + dev_families:
        for s in fam:
            pool.append(_record(s, rng))
            oracle.append({"id": s.id, "description": f"Use to {s.verb} {s.domain} data with {s.tech}."})
    for fam in families:
        for s in fam[:eval_siblings]:
            others = [o.id for o in fam if o.id != s.id]
            grades = {s.id: 3, **{o: 1 for o in others}}
            queries.append({"id": f"q{len(queries):03d}", "query": s.phrase(rng.choice(EVAL_TEMPLATES)),
                            "gt": [s.id], "grades": grades, "skip": [rng.choice(others)], "task_type": "single",
                            "domain": s.domain})
    for fam in dev_families:
        for s in fam:
            dev.append({"id": f"d{len(dev):03d}", "query": s.phrase(rng.choice(EVAL_TEMPLATES)), "gt": [s.id],
                        "task_type": "single", "domain": s.domain})
    dev_skills = [s for fam in dev_families for s in fam]
    for _ in range(max(1, n_multi // 2) if len(dev_skills) > 1 else 0):
        a, b = rng.sample(dev_skills, 2)
        text = MULTI_TEMPLATE.format(verb=a.verb, obj=a.obj, tech=a.tech, domain=a.domain, verb2=b.verb, obj2=b.obj, tech2=b.tech)
        dev.append({"id": f"d{len(dev):03d}", "query": text, "gt": [a.id, b.id], "task_type": "multi", "domain": a.domain})
    for fam in training_families:
        for s in fam:
            others = [o.id for o in fam if o.id != s.id]
            for template in TRAIN_TEMPLATES[:train_templates]:
                train.append({"query": s.phrase(template), "skill_id": s.id, "skip": [rng.choice(others)]})
    eval_skills = [s for fam in families for s in fam[:eval_siblings]]
    for _ in range(n_multi):
        a, b = rng.sample(eval_skills, 2)
        text = MULTI_TEMPLATE.format(verb=a.verb, obj=a.obj, tech=a.tech, domain=a.domain, verb2=b.verb, obj2=b.obj, tech2=b.tech)
        queries.append({"id": f"q{len(queries):03d}", "query": text, "gt": [a.id, b.id], "grades": {a.id: 3, b.id: 3},
                        "skip": [], "task_type": "multi", "domain": a.domain})
    train_skills = [s for fam in training_families for s in fam]
    for _ in range(max(1, n_multi // 2) if train_skills else 0):
        a, b = rng.sample(train_skills, 2)
        text = MULTI_TEMPLATE.format(verb=a.syn, obj=a.osyn, tech=a.tech, domain=a.domain, verb2=b.syn, obj2=b.osyn, tech2=b.tech)
        train.append({"query": text, "skill_ids": [a.id, b.id], "skip": []})

    distractors = []
    for fam in families:
        used = {s.name.rsplit("-", 1)[1] for s in fam}
        spare = [x for x in SUFFIXES if x not in used]
        objects = DOMAINS[fam[0].domain][1]
        for s, suffix in zip(fam[:eval_siblings], rng.sample(spare, eval_siblings)):
            obj, osyn = rng.choice([o for o in objects if o[0] not in {f.obj for f in fam}])
            twin = _Sibling(f"builtin-hard/{s.domain}/{s.tech}-{s.domain}-{suffix}", f"{s.tech}-{s.domain}-{suffix}", s.domain,
                            s.tech, s.verb, s.syn, s.detail, obj, osyn)  # the GT's operation on another object
            distractors.append({**_record(twin, rng, "builtin-hard"), "variant_of": s.id, "grade": 1})
        distractors += _generic(fam[0], "builtin-hard", rng)
    distractors.append({"id": "builtin-hard/general/universal-assistant", "name": "universal-assistant",
                        "description": "Handles any data, file, media or automation task.",
                        "body": "# Universal assistant\n" + " ".join(f"Can {v} things." for v, _, _ in OPERATIONS) + "\n",
                        "category": "general", "source": "builtin-hard"})
    rng.shuffle(pool)  # so ties between identical nd texts are not broken in the GT's favour
    own = {s.id for fam in training_families + dev_families for s in fam}
    generic_rng = random.Random(f"train-pool/{seed}")  # its own draws: every other file is as it was without it
    train_pool = [r for r in pool if r["id"] in own] + [
        g for fam in training_families for g in _generic(fam[0], "builtin-train", generic_rng)]
    paths = {name: out / f"{name}.jsonl" for name in FILES}
    for name, records in zip(paths, (pool, queries, distractors, oracle, train, dev, train_pool)):
        atomic_write_jsonl(paths[name], records)
    return paths


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", required=True)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    for name, path in generate(args.out, args.seed).items():
        print(f"{name}: {path}")


if __name__ == "__main__":
    main()
