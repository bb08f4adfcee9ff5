"""Property-based tests of the engine over generated lexicons and templates (hypothesis)."""

import re

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from builder.m2c import Template

DIMS = {"GENDER": ["M", "F", "N"], "NUMBER": ["SG", "PL"]}
GENDERS = DIMS["GENDER"]


@st.composite
def lexicons(draw):
    """Nouns with a fixed gender and forms that spell their features, adjectives with every form."""
    n_nouns = draw(st.integers(2, 6))
    genders = draw(st.lists(st.sampled_from(GENDERS), min_size=n_nouns, max_size=n_nouns))
    nouns = [{f"{g}.SG": f"n{i}{g}SG", f"{g}.PL": f"n{i}{g}PL"} for i, g in enumerate(genders)]
    n_adj = draw(st.integers(1, 4))
    adjs = [{f"{g}.{n}": f"a{j}{g}{n}" for g in GENDERS for n in ("SG", "PL")} for j in range(n_adj)]
    return nouns, adjs


SHAPES = [
    ("{noun} {adj.<noun.GENDER.NUMBER>}", False),
    ("{noun1} {adj1.<noun1.GENDER.NUMBER>} {{x}} {noun2} {adj2.<noun2.GENDER.NUMBER>}", True),
    ("{is:noun.SG|are:noun.PL} {noun} {adj.<noun.NUMBER>.<noun.GENDER>}", False),
    ("{noun.PL} {adj.PL.<noun.GENDER>} {noun.SG} {adj.<noun.GENDER>.SG}", False),
]


def _check(text: str) -> None:
    assert "{" not in text.replace("{x}", "") and "}" not in text.replace("{x}", "")
    tokens = text.split()
    for i, tok in enumerate(tokens):
        m = re.fullmatch(r"n(\d+)([MFN])(SG|PL)", tok)
        if m:
            adj = re.fullmatch(r"a\d+([MFN])(SG|PL)", tokens[i + 1])
            assert adj and adj.groups() == m.groups()[1:], text
            if tokens[0] in ("is", "are") and i == 1:
                assert tokens[0] == ("is" if m.group(3) == "SG" else "are"), text


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(lexicons(), st.sampled_from(SHAPES), st.integers(-1, 40), st.integers(0, 2**32 - 1),
       st.fixed_dictionaries({"distinct": st.booleans(), "unordered": st.booleans()}))
def test_no_unfilled_brace_agreement_holds_and_same_seed_same_tests(lex, shape, n, seed, options):
    nouns, adjs = lex
    text, duplicates = shape
    opts = {"noun": options, "adj": {"distinct": False}} if duplicates else None
    t = Template(text, dimensions=DIMS, options=opts, noun=nouns, adj=adjs)
    everything = t.render()
    assert len(everything) == len(t)
    sample = t.render(n, seed=seed)
    assert sample == t.render(n, seed=seed)
    assert len(sample) == (len(t) if n < 0 else min(n, len(t)))
    assert set(sample) <= set(everything)
    for out in sample:
        _check(out)
    if duplicates:
        halves = [tuple(tuple(h.split()) for h in s.split(" {x} ")) for s in everything]
        if options["distinct"]:
            assert all(re.match(r"n\d+", a[0]).group() != re.match(r"n\d+", b[0]).group() for a, b in halves)
        if options["unordered"]:
            # the noun copies are canonical (lexeme, then features, ascending) and every ordered fill
            # has exactly its canonical version among them
            def key(half):
                i, g, num = re.fullmatch(r"n(\d+)([MFN])(SG|PL)", half[0]).groups()
                return int(i), g, num

            assert all(key(a) <= key(b) for a, b in halves)
            ordered = Template(text, dimensions=DIMS, options={**opts, "noun": {**options, "unordered": False}},
                               noun=nouns, adj=adjs).render()
            canonical = {tuple(sorted(tuple(tuple(h.split()) for h in s.split(" {x} ")), key=key)) for s in ordered}
            assert canonical == set(halves) and len(halves) == len(set(halves))
        else:  # every fill's mirror image is a fill too
            assert {(b, a) for a, b in halves} == set(halves)


@settings(max_examples=40, deadline=None)
@given(st.lists(st.text(alphabet="abc", min_size=1, max_size=3), min_size=1, max_size=6, unique=True),
       st.lists(st.text(alphabet="xyz", min_size=1, max_size=3), min_size=1, max_size=6, unique=True),
       st.integers(0, 50), st.integers(0, 1000))
def test_plain_templates_sample_uniform_subsets_reproducibly(a, b, n, seed):
    t = Template("<{a}|{b}>", a=a, b=b)
    everything = t.render()
    assert everything == [f"<{x}|{y}>" for x in a for y in b]
    s = t.render(n, seed)
    assert s == t.render(n, seed) and len(set(s)) == len(s) == min(n, len(everything))
    assert s == [x for x in everything if x in set(s)]  # sampled fills come in index order
