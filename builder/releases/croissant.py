"""`croissant.json`: Croissant 1.0 metadata with the Responsible-AI (RAI) fields filled in from the
release's own review statistics, so what is claimed about annotation is what the workspace recorded."""

from __future__ import annotations

import datasets

from builder.releases.features import features_for, is_m2c
from builder.releases.stats import ReleaseStats

CONTEXT = {
    "@language": "en",
    "@vocab": "https://schema.org/",
    "citeAs": "cr:citeAs",
    "column": "cr:column",
    "conformsTo": "dct:conformsTo",
    "cr": "http://mlcommons.org/croissant/",
    "rai": "http://mlcommons.org/croissant/RAI/",
    "data": {"@id": "cr:data", "@type": "@json"},
    "dataType": {"@id": "cr:dataType", "@type": "@vocab"},
    "dct": "http://purl.org/dc/terms/",
    "examples": {"@id": "cr:examples", "@type": "@json"},
    "extract": "cr:extract",
    "field": "cr:field",
    "fileProperty": "cr:fileProperty",
    "fileObject": "cr:fileObject",
    "fileSet": "cr:fileSet",
    "format": "cr:format",
    "includes": "cr:includes",
    "isLiveDataset": "cr:isLiveDataset",
    "jsonPath": "cr:jsonPath",
    "key": "cr:key",
    "md5": "cr:md5",
    "parentField": "cr:parentField",
    "path": "cr:path",
    "recordSet": "cr:recordSet",
    "references": "cr:references",
    "regex": "cr:regex",
    "repeated": "cr:repeated",
    "replace": "cr:replace",
    "sc": "https://schema.org/",
    "separator": "cr:separator",
    "source": "cr:source",
    "subField": "cr:subField",
    "transform": "cr:transform",
}


def _data_type(feature) -> str:
    if isinstance(feature, datasets.ClassLabel):
        return "sc:Integer"
    if isinstance(feature, datasets.List):
        return _data_type(feature.feature)
    return {"string": "sc:Text", "bool": "sc:Boolean", "float64": "sc:Float"}.get(feature.dtype, "sc:Integer")


def _pct(x: float) -> str:
    return f"{100 * x:.1f}%"


def croissant(*, name: str, version: str, license: str, created_at: str, langs: list[str], files: dict[str, str],
              stats: ReleaseStats, citation: str) -> dict:
    """files: path -> sha256 of each parquet file."""
    distribution = [
        {"@type": "cr:FileObject", "@id": path, "name": path, "contentUrl": path,
         "encodingFormat": "application/x-parquet", "sha256": digest}
        for path, digest in sorted(files.items())
    ]
    record_sets = []
    for config in sorted(stats.counts):
        ids = [p for p in sorted(files) if p.startswith(f"data/{config}/")]
        fields = []
        for col, feature in features_for(config).items():
            field = {"@type": "cr:Field", "@id": f"{config}/{col}", "name": col, "dataType": _data_type(feature),
                     "source": {"fileObject": {"@id": ids[0]} if len(ids) == 1 else [{"@id": i} for i in ids],
                                "extract": {"column": col}}}
            if isinstance(feature, datasets.List):
                field["repeated"] = True
            if isinstance(feature, datasets.ClassLabel):
                field["description"] = "class label index: " + ", ".join(f"{i}={n}" for i, n in enumerate(feature.names))
            fields.append(field)
        record_sets.append({"@type": "cr:RecordSet", "@id": config, "name": config, "field": fields})
    review = stats.review
    agreements = [f"{r.config} {a.stage}: {a.agreement.items} items reviewed by two or more curators, Krippendorff's "
                  f"alpha {'undefined' if a.agreement.alpha is None else f'{a.agreement.alpha:.2f}'}, "
                  f"{a.adjudicated} adjudicated"
                  for r in review for a in r.agreement]
    models = ", ".join(f"{m['model']} ({', '.join(f'{s} {n}' for s, n in m['calls'].items())} calls)" for m in stats.models)
    curators = sum(r.curators for r in review)
    return {
        "@context": CONTEXT,
        "@type": "sc:Dataset",
        "conformsTo": "http://mlcommons.org/croissant/1.0",
        "name": name,
        "description": f"{name}: multilingual conceptual minimal pairs (XCOMPS style) in {len(langs)} language(s).",
        "version": version,
        "license": license,
        "datePublished": created_at,
        "inLanguage": langs,
        "citeAs": citation,
        "distribution": distribution,
        "recordSet": record_sets,
        "rai:dataCollection": "English concept-property pairs and sentences from COMPS; expert seed translations "
                              "into German and Chinese; LLM translation into the other languages with the seeds as "
                              "context; LLM-written sentences from curator-verified words.",
        "rai:dataCollectionType": ["Secondary data analysis", "Machine-generated", "Expert annotation"],
        "rai:dataAnnotationProtocol": "Curators review every LLM-proposed word in Label Studio (accept, correct, "
                                      "reject, ambiguous, with comments); items reviewed by several curators must agree "
                                      "or are adjudicated. Sentences are checked automatically to contain the verified "
                                      "concept and to differ only in it.",
        "rai:dataAnnotationPlatform": "Label Studio",
        "rai:dataAnnotationAnalysis": (
            f"{_pct(stats.reviewed_share)} of translated rows verified by curators or expert translators, "
            f"{_pct(stats.corrected_share)} contain a curator's correction; "
            + ("; ".join(agreements) if agreements else "no item was reviewed by two or more curators")
        ),
        "rai:annotationsPerItem": ", ".join(f"{r.config}: at least {r.min_reviewers}" for r in review
                                            if not is_m2c(r.config) and r.rows > r.source) or "none",
        "rai:annotatorDemographics": f"{curators} curator or expert-translator account(s) across languages; "
                                     "demographics are not recorded.",
        "rai:machineAnnotationTools": models or "none",
        "rai:dataBiases": "Concepts and properties come from English property norms (COMPS) and may not reflect "
                          "concepts salient in other cultures; LLM-written sentences may carry the model's biases.",
        "rai:dataLimitations": "Sentences are template-like and written by an LLM; translations of ambiguous "
                               "English words are disambiguated by German and Chinese seeds only.",
        "rai:dataUseCases": "Evaluating language models' conceptual knowledge across languages (direct probability "
                            "comparison, metalinguistic prompting, probing); not for training.",
        "rai:personalSensitiveInformation": "None: the data describe everyday concepts and hold no personal data.",
        "rai:dataReleaseMaintenancePlan": "Versioned releases (git tags vX.Y.Z); published versions are never changed; "
                                          "corrections appear in new versions with a changelog.",
    }
