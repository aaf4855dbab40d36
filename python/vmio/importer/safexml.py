"""A bounded, entity-free XML reader for the documents vmio imports (libvirt's domain XML).

Python's `xml.etree` expands internal entities and reads DOCTYPEs; the Python documentation
("XML vulnerabilities", xml.html#xml-vulnerabilities) lists the attacks that follow (the
"billion laughs" entity expansion, external entities), and defusedxml's answer is to refuse
every DOCTYPE and entity declaration at the expat level. This module does the same without
the dependency: expat (pyexpat) drives a small tree builder, and

    refuse: a DOCTYPE, an entity declaration, a reference to an undeclared entity
    refuse: a file over MAX_INPUT_BYTES (vmio.sim.read_text), nesting over MAX_DEPTH,
            more than MAX_ELEMENTS elements
    keep:   each element's line (`line_of`), for messages that name where a value is

Every refusal is a `VmioError` of one line naming the file, the line and what is accepted.
"""

from __future__ import annotations

import xml.etree.ElementTree as ET
from xml.parsers import expat

from vmio.sim import VmioError, read_text

MAX_DEPTH = 64
"""Deepest element nesting accepted (libvirt's domain XML nests under 10 levels)."""

MAX_ELEMENTS = 200_000
"""Most elements accepted in one document."""


class XmlDocument:
    """A parsed document: its root element and the line each element starts on."""

    def __init__(self, root: ET.Element, lines: dict[int, int], path: str) -> None:
        self.root = root
        self.path = path
        self._lines = lines

    def line_of(self, el: ET.Element) -> int:
        return self._lines.get(id(el), 0)


class _Refused(Exception):
    pass


def parse_text(text: str, path: str) -> XmlDocument:
    """Parse `text` (from file `path`, named in errors) into an `XmlDocument`."""
    p = expat.ParserCreate()
    root: list[ET.Element] = []
    stack: list[ET.Element] = []
    lines: dict[int, int] = {}
    count = [0]

    def start(tag: str, attrs: dict[str, str]) -> None:
        count[0] += 1
        if len(stack) >= MAX_DEPTH:
            raise _Refused(f"elements nest deeper than {MAX_DEPTH} levels")
        if count[0] > MAX_ELEMENTS:
            raise _Refused(f"more than {MAX_ELEMENTS} elements")
        el = ET.Element(tag, attrs)
        lines[id(el)] = p.CurrentLineNumber
        if stack:
            stack[-1].append(el)
        else:
            root.append(el)
        stack.append(el)

    def end(tag: str) -> None:
        stack.pop()

    def chars(data: str) -> None:
        if not stack:
            return
        el = stack[-1]
        if len(el):
            last = el[-1]
            last.tail = (last.tail or "") + data
        else:
            el.text = (el.text or "") + data

    def doctype(*_args: object) -> None:
        raise _Refused("a DOCTYPE is not accepted (entities and external DTDs are refused)")

    def entity(*_args: object) -> None:
        raise _Refused("an entity declaration is not accepted")

    def external(*_args: object) -> int:
        raise _Refused("an external entity reference is not accepted")

    p.StartElementHandler = start
    p.EndElementHandler = end
    p.CharacterDataHandler = chars
    p.StartDoctypeDeclHandler = doctype
    p.EntityDeclHandler = entity
    p.UnparsedEntityDeclHandler = entity
    p.ExternalEntityRefHandler = external
    p.SetParamEntityParsing(expat.XML_PARAM_ENTITY_PARSING_NEVER)
    try:
        p.Parse(text, True)
    except _Refused as err:
        raise VmioError(
            f"{path}:{p.CurrentLineNumber}: {err}; accepted: a libvirt domain XML "
            "(virsh dumpxml) without DOCTYPE or entities"
        ) from None
    except expat.ExpatError as err:
        reason = expat.errors.messages.get(err.code, "not well-formed")
        raise VmioError(
            f"{path}:{err.lineno}:{err.offset + 1}: not well-formed XML ({reason}); "
            "accepted: a libvirt domain XML (virsh dumpxml)"
        ) from None
    if not root:
        raise VmioError(f"{path}: no XML element; accepted: a libvirt domain XML (virsh dumpxml)")
    return XmlDocument(root[0], lines, path)


def parse_file(path: str) -> XmlDocument:
    """Read `path` (bounded, UTF-8, a regular file: vmio.sim.read_text) and parse it."""
    return parse_text(read_text(path, "domain XML"), str(path))
