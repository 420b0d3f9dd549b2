"""A small DOM over the standard library's HTML parser, for tests that read a report's tables."""

from __future__ import annotations

from dataclasses import dataclass, field
from html.parser import HTMLParser

_VOID = {"br", "hr", "img", "input", "meta", "link", "col", "wbr", "source", "path", "use",
         "rect", "circle", "line", "polyline", "polygon", "ellipse", "stop"}


@dataclass
class Element:
    tag: str
    attrs: dict[str, str]
    children: list[Element | str] = field(default_factory=list)

    @property
    def text(self) -> str:
        return "".join(c if isinstance(c, str) else c.text for c in self.children)

    @property
    def classes(self) -> set[str]:
        return set(self.attrs.get("class", "").split())

    def iter(self):
        yield self
        for c in self.children:
            if isinstance(c, Element):
                yield from c.iter()

    def find_all(self, tag: str | None = None, cls: str | None = None, **attrs: str) -> list[Element]:
        return [e for e in self.iter() if (tag is None or e.tag == tag)
                and (cls is None or cls in e.classes)
                and all(e.attrs.get(k) == v for k, v in attrs.items())]

    def find(self, tag: str | None = None, cls: str | None = None, **attrs: str) -> Element:
        found = self.find_all(tag, cls, **attrs)
        assert found, f"no <{tag} class={cls} {attrs}>"
        return found[0]

    def next_sibling(self, parent: Element, tag: str) -> Element:
        """The first ``tag`` element after this one among ``parent``'s children."""
        kids = [c for c in parent.children if isinstance(c, Element)]
        for c in kids[kids.index(self) + 1:]:
            if c.tag == tag:
                return c
        raise AssertionError(f"no <{tag}> after <{self.tag}>")


class _Builder(HTMLParser):
    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.root = Element("document", {})
        self.stack = [self.root]

    def handle_starttag(self, tag, attrs):
        e = Element(tag, {k: v or "" for k, v in attrs})
        self.stack[-1].children.append(e)
        if tag not in _VOID:
            self.stack.append(e)

    def handle_startendtag(self, tag, attrs):
        self.stack[-1].children.append(Element(tag, {k: v or "" for k, v in attrs}))

    def handle_endtag(self, tag):
        for i in range(len(self.stack) - 1, 0, -1):
            if self.stack[i].tag == tag:
                del self.stack[i:]
                return

    def handle_data(self, data):
        self.stack[-1].children.append(data)


def parse(html: str) -> Element:
    b = _Builder()
    b.feed(html)
    b.close()
    return b.root


def table_rows(table: Element) -> list[list[str]]:
    """Each row's cells as stripped text (header row included)."""
    return [[" ".join(c.text.split()) for c in tr.children if isinstance(c, Element) and c.tag in ("td", "th")]
            for tr in table.find_all("tr")]


def following(root: Element, start: Element, tag: str, cls: str | None = None) -> Element:
    """The first ``tag`` (of class ``cls``) after ``start`` in document order."""
    seen = False
    for e in root.iter():
        if e is start:
            seen = True
        elif seen and e.tag == tag and (cls is None or cls in e.classes):
            return e
    raise AssertionError(f"no <{tag}> after <{start.tag} {start.attrs}>")
