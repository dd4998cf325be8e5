"""The query SRA-Bench retrieves with (``cli/retrieve.py``'s ``_build_query``): the dataset's prompt builder's
user prompt, then its system prompt when it has one, then, for ToolQA, the few-shot examples, joined by newlines.

The builders' strings are the release's ``src/sragents/prompts.py``, character for character. ToolQA's ReAct
instruction and few-shots (14 KB, ported by the release from ToolQA) are read from a checkout of the release,
``<data.root>/src/sragents/toolqa/{prompts,fewshots}.py``, when one is there. A dataset the release has no
builder for (a user's own, or our sample's ``devsingle``/``devmulti``) is retrieved with its question as written
— what the release's documented way to add one (``return "", instance["question"]``) does — and counted.
"""
from __future__ import annotations

import ast
from pathlib import Path
from typing import Any, Callable

from ..types import DataError, LoadReport

THEOREMQA_SYSTEM = (
    "You are a science teacher, you are supposed to provide a solution to a "
    "given problem. You need to output the answer in your final sentence like "
    '"Therefore, the answer is ...". The answer can only be one of the following '
    "forms:\n"
    "1. a numerical value like 0.1, no symbol at all.\n"
    "2. a list of number like [2, 3, 4].\n"
    "3. True/False.\n"
    "4. an option like (a), (b), (c), (d)"
)
CHAMP_SYSTEM = "You are an expert on mathematics."
CHAMP_USER = (
    "Solve the following problem. Make sure to show your work before giving "
    "the final answer.\n\n"
    "{question}\n\n"
    "After your solution, write your final answer on its own line in "
    "exactly this format:\n"
    "ANSWER: <your answer>\n\n"
    "The answer should be concise: a number, mathematical expression, "
    "Yes/No, or a brief phrase. Do not include explanations in the "
    "ANSWER line. Use plain text only — do not use LaTeX, dollar signs, "
    "or any other formatting (e.g., write n! not \\(n!\\) or $n!$)."
)
MEDCALC_SYSTEM = (
    "You are a helpful assistant for calculating a score for a given "
    "patient note. Please think step-by-step to solve the question and "
    "then generate the required score."
)
MEDCALC_USER = (
    "{question}\n\n"
    "Show your step-by-step calculation, then write your final answer on "
    "its own line in exactly this format:\n"
    "ANSWER: <your answer>\n\n"
    "For numeric answers, give the number only (e.g., 25.24). "
    "For date answers, use MM/DD/YYYY format. "
    "For scores, give the integer value. "
    "Do not include units or explanations in the ANSWER line."
)
TOOLQA_SOURCE = Path("src/sragents/toolqa")

BUILDERS: dict[str, Callable[[str], tuple[str, str]]] = {  # dataset -> question -> (system, user)
    "theoremqa": lambda q: (THEOREMQA_SYSTEM, f"Problem:{q}\nSolution:"),
    "logicbench": lambda q: ("", q),
    "champ": lambda q: (CHAMP_SYSTEM, CHAMP_USER.replace("{question}", q)),
    "medcalcbench": lambda q: (MEDCALC_SYSTEM, MEDCALC_USER.replace("{question}", q)),
    "bigcodebench": lambda q: ("", q),
}


def module_strings(path: Path) -> dict[str, str]:
    """The string constants a module assigns (literals and ``+`` of earlier ones), read without running it."""
    values: dict[str, str] = {}

    def value(node: ast.expr) -> str:
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            return node.value
        if isinstance(node, ast.Name) and node.id in values:
            return values[node.id]
        if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):
            return value(node.left) + value(node.right)
        raise ValueError("not a string expression")

    for stmt in ast.parse(path.read_text(encoding="utf-8")).body:
        if isinstance(stmt, ast.Assign) and len(stmt.targets) == 1 and isinstance(stmt.targets[0], ast.Name):
            try:
                values[stmt.targets[0].id] = value(stmt.value)
            except ValueError:
                continue
    return values


def _toolqa(root: Path) -> tuple[str, str]:
    """ToolQA's ``REACT_INSTRUCTION`` and ``TOOLQA_EXAMPLES`` from the release checkout under ``root``."""
    prompts, fewshots = root / TOOLQA_SOURCE / "prompts.py", root / TOOLQA_SOURCE / "fewshots.py"
    for path, name in ((prompts, "REACT_INSTRUCTION"), (fewshots, "TOOLQA_EXAMPLES")):
        if not path.exists() or name not in module_strings(path):
            raise DataError(str(path), None, name, "ToolQA's retrieval query needs it: pass a checkout of "
                            "github.com/oneal2000/SR-Agents as data.root")
    return module_strings(prompts)["REACT_INSTRUCTION"], module_strings(fewshots)["TOOLQA_EXAMPLES"]


def retrieval_query(instance: dict[str, Any], root: Path, report: LoadReport) -> str:
    dataset, question = instance["dataset"], instance["question"]
    if dataset == "toolqa":
        instruction, examples = _toolqa(root)
        return "\n".join([f"Question: {question}", instruction, examples])
    if dataset not in BUILDERS:
        report.count("query: no SRA-Bench prompt builder for this dataset (its question is the query)", dataset)
        return question
    system, user = BUILDERS[dataset](question)
    return "\n".join([user, system] if system else [user])
