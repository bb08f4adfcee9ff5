"""End-to-end journeys with a real Label Studio and the OpenAI-compatible test server.

The other journeys live beside the parts they exercise most: the curator's loop in
test_review_label_studio.py, the maintainer's two releases and their diff in test_releases.py, the
release gate failing on a planted regression in test_eval_cli.py, and the main job in test_cli.py.
"""

from sqlalchemy import select

from annotation.autoreview import accept_open_tasks
from annotation.review import pull, push
from builder import releases
from builder.generate import generate
from builder.languages import declare
from builder.releases.publish import PublishRequest, publish
from builder.reviews import review_status
from builder.selection import Scope
from builder.status import status
from builder.translate import translate
from builder.workspace import schema as t

from test_generate import stage

PROPS = "can fly,has feathers"


def test_a_new_language_declared_once_goes_through_every_stage_into_a_release(sample_ws, server, label_studio):
    ws, conn = sample_ws, label_studio
    declare(ws, code="sw", name="Swahili", typology="agglutinative", family="Niger-Congo (Bantu)", script="Latn")
    proposed = stage(ws, server, translate, ["sw"], PROPS).proposed["sw"]
    assert proposed > 0
    # Curators review the proposals in Label Studio (scripted through its API), and the pull verifies them.
    assert push(ws, conn, "sw").created == proposed
    assert accept_open_tasks(ws, conn, "translation", "sw", "curator-sw") == proposed
    assert pull(ws, conn).verified == proposed
    n_pairs = len(Scope.parse(ws, PROPS).pairs(ws))
    generated = stage(ws, server, generate, ["en", "sw"], PROPS).generated
    assert generated == {"en": n_pairs, "sw": n_pairs}
    assert push(ws, conn, "sw", stage="sentences").created == n_pairs
    accept_open_tasks(ws, conn, "sentences", "sw", "curator-sw")
    pull(ws, conn)
    rows = {(r["stage"], r["lang"]): r for r in review_status(ws)}
    assert rows[("sentences", "sw")]["accept"] == n_pairs and rows[("translation", "sw")]["pending"] == 0
    sw = next(r for r in status(ws, ["sw"]) if r.lang == "sw")
    assert sw.generate.generated == n_pairs
    # The release includes the new language as its own config, joined to English by pair id.
    target = ws.directory / "releases"
    publish(ws, PublishRequest(target=target, version="0.1.0", langs=["en", "sw"]))
    assert set(releases.configs(target, "0.1.0")) == {"en", "sw"}
    swahili = releases.load(target, "0.1.0", "sw")
    english = releases.load(target, "0.1.0", "en")
    assert len(swahili) == n_pairs and set(swahili["pair_id"]) == set(english["pair_id"])
    assert set(swahili["review_status"]) == {"verified"} and set(swahili["lang"]) == {"sw"}
    words = ws.rows(select(t.verified_words).where(t.verified_words.c.lang == "sw"))
    assert {w["reviewer"] for w in words} == {"curator-sw@builder.local"}
