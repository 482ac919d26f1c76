"""The one YAML loader of trainperf's files (suites, ``--set`` values, the hardware
catalog): PyYAML's safe loader with the refusals a file of settings needs, each one line
naming where (``source:line``, or the source alone) and what (``YamlRefused``):

- a key given twice in one mapping (PyYAML keeps the last silently), checked on the
  composed node, before merge keys (``<<``) are flattened, so a key that overrides a
  merged one stays allowed;
- aliases that repeat more than ``budget`` nodes in all (each alias counts the nodes of
  what it repeats, fully expanded; a recursive alias is refused): the composer shares an
  aliased node instead of copying it, but whatever walks the document afterwards (a line
  index, a digest, validation) pays for the full expansion, which grows exponentially
  with nested aliases ("billion laughs");
- an integer of more than ``MAX_INT_DIGITS`` digits: Python will not convert a decimal
  string of more than 4,300 digits (CVE-2020-10735) and raises a ValueError mid-parse.

What PyYAML itself refuses (malformed YAML, a control character) stays its error
(``yaml.YAMLError``), for the caller to word.
"""

from __future__ import annotations

from typing import Any

import yaml

MAX_INT_DIGITS = 100


class YamlRefused(ValueError):
    """A document the loader refuses; the message is ``where: problem``, one line."""


class StrictLoader(yaml.SafeLoader):
    """See the module doc. ``source`` names the text in refusals, with the line when
    ``lines`` (a file) or alone (a value given on the command line); ``budget_hint``
    follows the alias refusal (how to raise the limit); ``numbers`` names what the
    integers are for ("a suite's numbers") and ``numbers_hint``, when given, follows the
    integer refusal in parentheses (the bound that matters to the reader)."""

    def __init__(
        self,
        text: str,
        source: str,
        budget: int,
        *,
        lines: bool = True,
        budget_hint: str = "the limit",
        numbers: str = "numbers",
        numbers_hint: str = "",
    ) -> None:
        super().__init__(text)
        self.source, self.budget, self.repeated = source, budget, 0
        self.lines, self.budget_hint, self.numbers = lines, budget_hint, numbers
        self.numbers_hint = numbers_hint
        self._sizes: dict[int, int] = {}

    def compose_node(self, parent: Any, index: Any) -> Any:
        if self.check_event(yaml.AliasEvent):
            event = self.peek_event()
            node = self.anchors.get(event.anchor)
            if node is not None:  # an undefined alias is left to the composer's own error
                self.repeated += self._expanded_size(node, event.start_mark)
                if self.repeated > self.budget:
                    raise self._refuse(
                        event.start_mark,
                        f"YAML aliases repeat more than {self.budget:,} nodes in all "
                        f"({self.budget_hint})",
                    )
        return super().compose_node(parent, index)

    def compose_mapping_node(self, anchor: Any) -> Any:
        node = super().compose_mapping_node(anchor)
        first: dict[tuple[str, str], int] = {}
        for key_node, _ in node.value:
            if not isinstance(key_node, yaml.ScalarNode):
                continue
            key, line = (key_node.tag, key_node.value), key_node.start_mark.line + 1
            if key in first:
                raise self._refuse(
                    key_node.start_mark,
                    f"duplicate key '{key_node.value}' (first given on line {first[key]})",
                )
            first[key] = line
        return node

    def construct_yaml_int(self, node: yaml.ScalarNode) -> int:
        digits = sum(c.isdigit() for c in str(node.value))
        if digits > MAX_INT_DIGITS:
            hint = f" ({self.numbers_hint})" if self.numbers_hint else ""
            raise self._refuse(
                node.start_mark,
                f"an integer of {digits:,} digits: {self.numbers} have at most "
                f"{MAX_INT_DIGITS}{hint}",
            )
        return super().construct_yaml_int(node)

    def _expanded_size(self, node: yaml.Node, mark: Any) -> int:
        if node.end_mark is None:  # still being composed: the alias is inside its anchor
            raise self._refuse(mark, "a recursive YAML alias (inside the node it names)")
        if id(node) not in self._sizes:
            children: list[Any] = []
            if isinstance(node, yaml.MappingNode):
                children = [child for pair in node.value for child in pair]
            elif isinstance(node, yaml.SequenceNode):
                children = node.value
            self._sizes[id(node)] = 1 + sum(self._expanded_size(c, mark) for c in children)
        return self._sizes[id(node)]

    def _refuse(self, mark: Any, problem: str) -> YamlRefused:
        where = f"{self.source}:{mark.line + 1}" if self.lines else self.source
        return YamlRefused(f"{where}: {problem}")


StrictLoader.add_constructor("tag:yaml.org,2002:int", StrictLoader.construct_yaml_int)
