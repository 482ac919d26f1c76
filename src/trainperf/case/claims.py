"""A suite's description audited against its cases.

A suite's ``description`` is prose for people; its ``claims`` say the same facts in a form
a program checks. ``claim_problems(suite)`` returns what does not hold, in two steps:

1. **Prose to claims.** ``prose_facts`` reads the description with a small, fixed
   vocabulary (``PATTERNS``): a square ``224x224`` is an image size, ``N tokens`` or
   ``sequence N`` a sequence length, ``batch N`` / ``batch sizes N to M`` / ``N per GPU``
   batch sizes, ``fp32``/``fp16``/``bf16``/``tf32`` precisions, ``N, M and K GPUs`` device
   counts, ``DDP``/``FSDP`` parallel modes, ``PyTorch``/``JAX``/``torch.compile``,
   ``N warm-up and M measured steps`` a fixed step policy, ``N s measuring budget`` an
   adaptive one's seconds, and the models' names (``MODEL_NAMES``). Each fact belongs to
   the last model named before it in its clause (clauses end at ``.``, ``;`` and ``:``).
   Every fact must be confirmed by a claim that lists its value for its field and speaks
   of cases of that model. Every other number of
   the description must be listed in a claim's ``unchecked`` (a parameter count, a JPEG's
   size): a number the vocabulary does not read is never passed over silently.
2. **Claims to cases.** A claim is a mapping: ``where`` (optional) selects cases by field
   (a value or a list of values); every other key is a field and the exact list of values
   the selected cases take (a scalar: that one value); ``cases`` is how many there are.
   Excluded cases are left out: they never run. Fields are the case's, with ``image_size``
   and ``seq_len`` resolved to the model's natural size when a case leaves them unset
   (cases of models without that size are not counted), ``parallel`` resolved from
   ``auto``, and three derived ones: ``min_runs`` (the runs a case has at least),
   ``budget_s`` (an adaptive step policy's seconds) and ``world`` (devices x nodes).

Example, in a suite file::

    description: ResNet-50 at 224x224 in bf16, batch 32 and 64.
    claims:
      - {model: resnet50, image_size: 224, precision: bf16, batch_size: [32, 64]}
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import Any

from trainperf.case.spec import Case
from trainperf.case.suite import PlannedCase, Suite
from trainperf.measure.policy import AdaptivePolicy, parse_policy
from trainperf.measure.runs import MIN_RUNS, FixedRuns, parse_runs

CLAIM_KEYS = ("where", "cases", "unchecked")

# How the descriptions name the zoo's models; a zoo name written as it is counts too.
MODEL_NAMES = {
    r"CifarNet": "cifarnet",
    r"AlexNet": "alexnet",
    r"GoogLeNet": "googlenet",
    r"Inception-v3": "inception_v3",
    r"Inception-v4": "inception_v4",
    r"ResNet-(18|34|50|101|152)": r"resnet\1",
    r"VGG-(16|19)": r"vgg\1",
    r"BERT-SWAG|SWAG": "bert-swag",
    r"BERT-SQuAD|SQuAD": "bert-squad",
    r"GPT-2 small": "gpt2-small",
    r"Llama-style tiny model": "llama-tiny",
    r"Llama 3\.2 1B": "llama3.2-1b",
    r"Llama 3 8B": "llama3-8b",
    r"Llama 3 70B": "llama3-70b",
}

_LIST = r"\d+(?:(?:,| and| or| to|, and) \d+)*"
# (field, pattern): every number of a LIST group is a value; see the module docstring.
PATTERNS: tuple[tuple[str, str], ...] = (
    ("image_size", r"\b(\d+)x(\1)\b"),
    ("seq_len", r"\b(\d+)(?: |-)tokens?\b"),
    ("seq_len", r"\bsequence (\d+)\b"),
    ("batch_size", rf"\bbatch(?:es| sizes?)?(?: from)? ({_LIST})"),
    ("batch_size", rf"\b({_LIST}) per (?:GPU|device)\b"),
    ("batch_size", r"\blargest batch that fits\b()"),
    ("precision", r"\b(fp32|fp16|bf16|tf32)\b"),
    ("world", rf"\b({_LIST}) (?:GPUs?|devices?|ranks?)\b"),
    ("world", r"\b(\d+)-(?:GPU|device|rank)\b"),
    ("threads", rf"\b({_LIST}) threads\b"),
    ("workers", rf"\b({_LIST}) loader processes\b"),
    ("steps", r"\b(\d+) warm-up and (\d+) measured steps\b"),
    ("budget_s", r"\b(\d+) s measuring budget\b"),
    ("min_runs", r"\bat least (\d+) independent runs\b"),
    ("parallel", r"\b(DDP|DistributedDataParallel|FSDP)2?\b"),
    ("channels_last", r"\bchannels-last\b()"),
    ("scaling", r"\b(weak|strong) scaling\b"),
    ("framework", r"\b(PyTorch|JAX)\b"),
    ("compile", r"\btorch\.compile\b()"),
)
_KEYWORDS = {
    "DDP": "ddp",
    "DistributedDataParallel": "ddp",
    "FSDP": "fsdp",
    "PyTorch": "pytorch",
    "JAX": "jax",
}


def prose_facts(description: str) -> list[tuple[str, Any, str | None, str]]:
    """The facts the description states: (field, value, model or None, the phrase)."""
    facts = []
    for clause in re.split(r"[.;:](?:\s|$)", description):
        models = _models_named(clause)
        for field, pattern in PATTERNS:
            for match in re.finditer(pattern, clause):
                model = _last_before(models, match.start())
                for value in _values(field, match):
                    facts.append((field, value, model, match.group(0)))
        facts += [("model", name, name, phrase) for _, name, phrase in models]
    return facts


def claim_problems(suite: Suite) -> list[str]:
    """What the suite's description says that its claims do not, what its claims say that
    its cases do not, and the numbers of the description nothing reads; empty when none."""
    running = [p for p in suite.planned if not p.excluded_by]
    problems: list[str] = []
    covered: list[tuple[set[str], dict[str, list[Any]]]] = []
    unchecked: list[str] = []
    if not suite.claims:
        problems.append("no claims: state what the description says as claims")
    for index, claim in enumerate(suite.claims):
        where = f"claims[{index}]"
        selected = [p for p in running if _selects(claim.get("where", {}), p.fields)]
        unchecked += claim.get("unchecked", [])
        asserted = {k: _as_list(v) for k, v in claim.items() if k not in CLAIM_KEYS}
        if not selected and (asserted or "where" in claim):
            problems.append(f"{where}: selects no case that runs")
            continue
        if "cases" in claim and claim["cases"] != len(selected):
            problems.append(f"{where}: says {claim['cases']} cases, the suite has {len(selected)}")
        for field, values in asserted.items():
            actual = _values_of(field, selected)
            if set(map(_key, values)) != set(map(_key, actual)):
                problems.append(
                    f"{where}: {field} is {_show(values)}, the cases run {_show(actual)}"
                )
        covered.append(({str(p.fields["model"]) for p in selected}, asserted))
    for field, value, model, phrase in prose_facts(suite.description):
        if not any(
            _key(value) in map(_key, asserted.get(field, [])) and (model is None or model in models)
            for models, asserted in covered
        ):
            about = f" of {model}" if model else ""
            problems.append(f"description: '{phrase}' ({field} {value!r}{about}) has no claim")
    problems += _unread_numbers(suite.description, unchecked)
    return problems


def _models_named(clause: str) -> list[tuple[int, str, str]]:
    from trainperf import models

    found = []
    for pattern, name in MODEL_NAMES.items():
        for match in re.finditer(rf"\b(?:{pattern})(?![\w-])", clause):
            found.append((match.start(), match.expand(name), match.group(0)))
    for name in models.names():
        for match in re.finditer(rf"(?<![\w`-]){re.escape(name)}(?![\w-])", clause):
            found.append((match.start(), name, match.group(0)))
    return sorted(found)


def _last_before(models: list[tuple[int, str, str]], at: int) -> str | None:
    before = [name for start, name, _ in models if start < at]
    return before[-1] if before else None


def _values(field: str, match: re.Match[str]) -> list[Any]:
    text = match.group(1)
    if field == "steps":
        return [f"fixed:{match[1]}:{match[2]}"]
    if field in ("parallel", "framework"):
        return [_KEYWORDS[text]]
    if field in ("channels_last", "compile"):
        return [True]
    if field == "batch_size" and text == "":
        return ["max"]
    if field in ("precision", "scaling"):
        return [text]
    return [int(n) for n in re.findall(r"\d+", text)][: 1 if field == "image_size" else None]


def _unread_numbers(description: str, unchecked: list[str]) -> list[str]:
    """Numbers the vocabulary does not read, unless a claim lists their phrase."""
    text = description
    for phrase in unchecked:
        if phrase not in text:
            return [f"unchecked phrase '{phrase}' is not in the description"]
        text = text.replace(phrase, " ")
    read = [m.span() for _, p in PATTERNS for m in re.finditer(p, text)]
    read += [(m.start(), m.end()) for m in re.finditer("|".join(MODEL_NAMES), text)]
    problems = []
    for number in re.finditer(r"\d+(?:\.\d+)?", text):
        if not any(start <= number.start() < end for start, end in read):
            context = text[max(0, number.start() - 20) : number.end() + 20].replace("\n", " ")
            problems.append(
                f"description: the number {number.group(0)} in '...{context}...' is neither "
                "read as a claim nor listed in a claim's unchecked"
            )
    return problems


def _selects(where: dict[str, Any], fields: dict[str, Any]) -> bool:
    return all(
        _key(_field_value(name, fields)) in map(_key, _as_list(wanted))
        for name, wanted in where.items()
    )


def _values_of(field: str, planned: Iterable[PlannedCase]) -> list[Any]:
    values = [_field_value(field, p.fields) for p in planned]
    if field in ("image_size", "seq_len"):
        values = [v for v in values if v is not None]
    return values


def _field_value(field: str, fields: dict[str, Any]) -> Any:
    """A case's value of ``field``, with the resolutions and derived fields of the docstring."""
    if field in ("image_size", "seq_len"):
        from trainperf import models

        spec = models.look_up(fields["model"])
        if spec is None or spec.size_name != field:
            return None
        return fields[field] if fields[field] is not None else spec.natural_size
    if field == "parallel":
        return Case.model_validate(fields | {"batch_size": 1}).mode
    if field == "world":
        return fields["devices"] * fields["nodes"]
    if field == "min_runs":
        policy = parse_runs(fields["runs"])
        return policy.runs if isinstance(policy, FixedRuns) else MIN_RUNS
    if field == "budget_s":
        policy = parse_policy(fields["steps"])
        return policy.max_seconds if isinstance(policy, AdaptivePolicy) else None
    return fields[field]


def _as_list(value: Any) -> list[Any]:
    return value if isinstance(value, list) else [value]


def _key(value: Any) -> Any:
    """Numbers compare by value (20 == 20.0), everything else as itself."""
    return float(value) if isinstance(value, int | float) and not isinstance(value, bool) else value


def _show(values: list[Any]) -> str:
    return ", ".join(sorted({str(v) for v in values}))
