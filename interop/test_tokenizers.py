"""The Go tokenizer against Hugging Face `tokenizers` itself.

For every tokenizer.json we keep (the four real ones, the small ones trained
with the library for each model type, and the one `sparkconv fixture` writes)
the library encodes the public test texts, `sparkconv tokenize` encodes the
same texts, and the ids must be identical, with and without special tokens.
The checked-in golden ids (what the Go unit tests read) must be what the
library produces today, and decoding must agree with the library's decode.
"""

import json
import pathlib

import pytest

from conftest import REPO, need, report

TESTDATA = REPO / "testdata" / "tokenizers"
TEXTS = [json.loads(l)["text"] for l in (TESTDATA / "golden" / "public.jsonl").read_text().splitlines()]


def tokenizer_files():
    real = sorted(p for p in TESTDATA.glob("*/tokenizer.json") if p.parent.name != "trained")
    trained = sorted((TESTDATA / "trained").glob("*/tokenizer.json"))
    return real + trained


def golden_path(tok: pathlib.Path, special: bool) -> pathlib.Path:
    suffix = ".public.special.jsonl" if special else ".public.jsonl"
    if tok.parent.parent.name == "trained":
        return tok.parent / ("public.special.jsonl" if special else "public.jsonl")
    return TESTDATA / "golden" / (tok.parent.name + suffix)


def go_encode(sparkconv, tok: pathlib.Path, texts, special: bool):
    stdin = "".join(json.dumps({"text": t}) + "\n" for t in texts)
    args = ["tokenize", "--tokenizer", tok] + (["--special"] if special else [])
    out = sparkconv.run(*args, stdin=stdin).stdout.splitlines()
    return [json.loads(l)["ids"] for l in out]


def compare(name, texts, want, got):
    assert len(got) == len(want)
    bad = [i for i, (w, g) in enumerate(zip(want, got)) if w != g]
    if bad:
        i = bad[0]
        pytest.fail(f"{name}: {len(bad)}/{len(texts)} lines differ; first line {i + 1} {texts[i][:60]!r}:\n hf {want[i][:40]}\n go {got[i][:40]}")


@pytest.mark.parametrize("tok", tokenizer_files(), ids=lambda p: p.parent.name)
@pytest.mark.parametrize("special", [False, True], ids=["plain", "special"])
def test_go_tokenizer_matches_hf(sparkconv, tok, special):
    tokenizers = need("tokenizers")
    hf = tokenizers.Tokenizer.from_file(str(tok))
    want = [e.ids for e in hf.encode_batch(TEXTS, add_special_tokens=special)]
    golden = golden_path(tok, special)
    if golden.exists():
        kept = [json.loads(l)["ids"] for l in golden.read_text().splitlines()]
        compare(f"{tok.parent.name} checked-in golden vs tokenizers {tokenizers.__version__}", TEXTS, want, kept)
    compare(tok.parent.name, TEXTS, want, go_encode(sparkconv, tok, TEXTS, special))
    report("tokenizer", tokenizer=tok.parent.name, special=special, library=f"tokenizers {tokenizers.__version__}", lines=len(TEXTS), equal=len(TEXTS))


@pytest.mark.parametrize("untied", [False, True], ids=["tied", "untied"])
@pytest.mark.parametrize("preset", ["tiny", "small"])
def test_fixture_tokenizer_matches_hf(work, sparkconv, preset, untied):
    """The byte-level BPE that `sparkconv fixture` trains loads in the library and encodes identically."""
    tokenizers = need("tokenizers")
    model = work.model(preset, untied)
    tok = model / "tokenizer.json"
    hf = tokenizers.Tokenizer.from_file(str(tok))
    vocab = json.loads((model / "config.json").read_text())["vocab_size"]
    assert hf.get_vocab_size(with_added_tokens=True) == vocab
    for special in (False, True):
        want = [e.ids for e in hf.encode_batch(TEXTS, add_special_tokens=special)]
        compare(f"fixture {preset}", TEXTS, want, go_encode(sparkconv, tok, TEXTS, special))
    # Round trip through the library's decoder on plain text.
    for t in TEXTS[:20]:
        assert hf.decode(hf.encode(t, add_special_tokens=False).ids, skip_special_tokens=False) == t


@pytest.mark.parametrize("name", ["wordlevel-whitespace", "unigram-scripts", "wordpiece-cased"])
def test_calibrate_takes_non_bpe_tokenizers(work, sparkconv, tmp_path, name):
    """`sparkconv calibrate` on a checkpoint whose tokenizer is WordLevel /
    Unigram / WordPiece: each sample's token count is the library's."""
    tokenizers = need("tokenizers")
    import shutil

    model = tmp_path / "model"
    shutil.copytree(work.model("small", False), model)
    shutil.copy(TESTDATA / "trained" / name / "tokenizer.json", model / "tokenizer.json")
    samples = [TEXTS[0] + " " + TEXTS[1], TEXTS[40], TEXTS[100]]
    (tmp_path / "samples.txt").write_text("\n---\n".join(samples) + "\n")
    sparkconv.run("calibrate", "--model", model, "--samples", tmp_path / "samples.txt", "--out", tmp_path / "calib", "--seq-len", "64", "--min-tokens", "1")
    summary = json.loads((tmp_path / "calib" / "summary.json").read_text())
    hf = tokenizers.Tokenizer.from_file(str(model / "tokenizer.json"))
    want = [len(hf.encode(s.strip("\n"), add_special_tokens=True).ids) for s in samples]
    assert [s["tokens"] for s in summary["samples"]] == want
