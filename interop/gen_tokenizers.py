"""Trains small tokenizers of every model type with Hugging Face `tokenizers`
and writes them with their golden ids to testdata/tokenizers/trained/.

    interop/.venv/bin/python interop/gen_tokenizers.py [OUT_DIR]

Each tokenizer is trained on corpus/calib.txt and combines its model
(BPE, WordPiece, WordLevel, Unigram) with the normalizers, pre-tokenizers,
post-processors and decoders such models ship with. For every line of
testdata/tokenizers/golden/public.jsonl the library's ids (without and with
special tokens) and its decode of the plain ids are written next to the
tokenizer.json. The Go tests read these files; the interop suite checks that
the library still gives these ids. (Training is not deterministic across
runs -- WordPiece's trainer is multithreaded -- so the checked-in
tokenizer.json files are the fixtures, not this script's output.)
"""

import hashlib
import json
import pathlib
import sys

from tokenizers import Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers, processors, trainers

REPO = pathlib.Path(__file__).resolve().parent.parent
CORPUS = REPO / "corpus" / "calib.txt"
TEXTS = REPO / "testdata" / "tokenizers" / "golden" / "public.jsonl"


def bert_wordpiece():
    """BERT uncased: BertNormalizer, BertPreTokenizer, [CLS] $A [SEP], WordPiece decoder."""
    t = Tokenizer(models.WordPiece(unk_token="[UNK]", max_input_chars_per_word=100))
    t.normalizer = normalizers.BertNormalizer(clean_text=True, handle_chinese_chars=True, strip_accents=None, lowercase=True)
    t.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    special = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
    tr = trainers.WordPieceTrainer(vocab_size=1200, special_tokens=special, min_frequency=1)
    return t, tr, lambda t: setattr_post(t, processors.TemplateProcessing(
        single="[CLS] $A [SEP]", special_tokens=[("[CLS]", t.token_to_id("[CLS]")), ("[SEP]", t.token_to_id("[SEP]"))])), decoders.WordPiece(prefix="##")


def wordpiece_cased():
    """Cased WordPiece: NFD + StripAccents, whitespace/punctuation/digit splits, a short max word, BertProcessing."""
    t = Tokenizer(models.WordPiece(unk_token="[UNK]", max_input_chars_per_word=12))
    t.normalizer = normalizers.Sequence([normalizers.NFD(), normalizers.StripAccents(), normalizers.Strip()])
    t.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.WhitespaceSplit(), pre_tokenizers.Punctuation(behavior="isolated"), pre_tokenizers.Digits(individual_digits=True)])
    special = ["[UNK]", "[CLS]", "[SEP]"]
    tr = trainers.WordPieceTrainer(vocab_size=900, special_tokens=special, continuing_subword_prefix="##")
    return t, tr, lambda t: setattr_post(t, processors.BertProcessing(("[SEP]", t.token_to_id("[SEP]")), ("[CLS]", t.token_to_id("[CLS]")))), \
        decoders.WordPiece(prefix="##", cleanup=False)


def wordlevel_whitespace():
    """Word-level: NFKC + Lowercase, Whitespace pre-tokenizer, unknown words to [UNK]."""
    t = Tokenizer(models.WordLevel(unk_token="[UNK]"))
    t.normalizer = normalizers.Sequence([normalizers.NFKC(), normalizers.Lowercase()])
    t.pre_tokenizer = pre_tokenizers.Whitespace()
    tr = trainers.WordLevelTrainer(vocab_size=1500, special_tokens=["[UNK]", "[BOS]", "[EOS]"], min_frequency=1)
    return t, tr, lambda t: setattr_post(t, processors.TemplateProcessing(
        single="[BOS] $A [EOS]", special_tokens=[("[BOS]", t.token_to_id("[BOS]")), ("[EOS]", t.token_to_id("[EOS]"))])), None


def wordlevel_split():
    """Word-level over a regex Split and CharDelimiterSplit, with a Replace normalizer."""
    t = Tokenizer(models.WordLevel(unk_token="<unk>"))
    t.normalizer = normalizers.Sequence([normalizers.Replace(Regex(r"\s+"), " "), normalizers.NFC()])
    t.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.CharDelimiterSplit(" "), pre_tokenizers.Split(Regex(r"\p{N}+|[^\p{L}\p{N}]"), behavior="isolated")])
    tr = trainers.WordLevelTrainer(vocab_size=2000, special_tokens=["<unk>"], min_frequency=2)
    return t, tr, None, None


def unigram_t5():
    """T5/SentencePiece-style Unigram: Nmt + NFKC + collapse spaces, Metaspace always, $A </s>."""
    t = Tokenizer(models.Unigram())
    t.normalizer = normalizers.Sequence([normalizers.Nmt(), normalizers.NFKC(), normalizers.Replace(Regex(" {2,}"), " ")])
    t.pre_tokenizer = pre_tokenizers.Metaspace(replacement="▁", prepend_scheme="always")
    tr = trainers.UnigramTrainer(vocab_size=2200, special_tokens=["<pad>", "</s>", "<unk>"], unk_token="<unk>", shrinking_factor=0.75, n_sub_iterations=2)
    return t, tr, lambda t: setattr_post(t, processors.TemplateProcessing(
        single="$A </s>", special_tokens=[("</s>", t.token_to_id("</s>"))])), decoders.Metaspace(replacement="▁", prepend_scheme="always")


def unigram_bytefallback():
    """Llama-style Unigram with byte_fallback: Prepend + Replace normalizers, no pre-tokenizer split, ByteFallback decoders."""
    t = Tokenizer(models.Unigram())
    t.normalizer = normalizers.Sequence([normalizers.Prepend("▁"), normalizers.Replace(" ", "▁")])
    t.pre_tokenizer = pre_tokenizers.Metaspace(replacement="▁", prepend_scheme="first", split=False)
    tr = trainers.UnigramTrainer(vocab_size=2000, special_tokens=["<unk>", "<s>", "</s>"], unk_token="<unk>", max_piece_length=8)
    dec = decoders.Sequence([decoders.Replace("▁", " "), decoders.ByteFallback(), decoders.Fuse(), decoders.Strip(content=" ", left=1, right=0)])
    return t, tr, lambda t: setattr_post(t, processors.TemplateProcessing(
        single="<s> $A", special_tokens=[("<s>", t.token_to_id("<s>"))])), dec


def unigram_scripts():
    """Unigram over UnicodeScripts + Whitespace pre-tokenization, BertNormalizer without lowercase, CTC-free decode."""
    t = Tokenizer(models.Unigram())
    t.normalizer = normalizers.BertNormalizer(clean_text=True, handle_chinese_chars=False, strip_accents=False, lowercase=False)
    t.pre_tokenizer = pre_tokenizers.Sequence([pre_tokenizers.WhitespaceSplit(), pre_tokenizers.UnicodeScripts()])
    tr = trainers.UnigramTrainer(vocab_size=1800, special_tokens=["<unk>"], unk_token="<unk>")
    return t, tr, None, None


def bpe_roberta():
    """RoBERTa/GPT-2 byte-level BPE with add_prefix_space and RobertaProcessing."""
    t = Tokenizer(models.BPE())
    t.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=True)
    tr = trainers.BpeTrainer(vocab_size=800, special_tokens=["<s>", "<pad>", "</s>", "<unk>"], initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    return t, tr, lambda t: setattr_post(t, processors.RobertaProcessing(("</s>", t.token_to_id("</s>")), ("<s>", t.token_to_id("<s>")))), \
        decoders.ByteLevel()


def bpe_suffix():
    """CLIP-style BPE: end_of_word_suffix </w>, unk, lowercase, punctuation split, BPEDecoder."""
    t = Tokenizer(models.BPE(unk_token="<unk>", end_of_word_suffix="</w>"))
    t.normalizer = normalizers.Sequence([normalizers.NFC(), normalizers.Replace(Regex(r"\s+"), " "), normalizers.Lowercase()])
    t.pre_tokenizer = pre_tokenizers.Sequence([pre_tokenizers.WhitespaceSplit(), pre_tokenizers.Punctuation()])
    tr = trainers.BpeTrainer(vocab_size=900, special_tokens=["<unk>", "<|startoftext|>", "<|endoftext|>"], end_of_word_suffix="</w>")
    return t, tr, None, decoders.BPEDecoder(suffix="</w>")


def bpe_prefix():
    """BPE with a ## continuing-subword prefix and Metaspace-free Whitespace split, WordPiece decoder."""
    t = Tokenizer(models.BPE(unk_token="[UNK]", continuing_subword_prefix="##", fuse_unk=True))
    t.normalizer = normalizers.Sequence([normalizers.NFKD(), normalizers.StripAccents(), normalizers.Lowercase()])
    t.pre_tokenizer = pre_tokenizers.Whitespace()
    tr = trainers.BpeTrainer(vocab_size=700, special_tokens=["[UNK]"], continuing_subword_prefix="##")
    return t, tr, None, decoders.WordPiece(prefix="##")


def setattr_post(t, p):
    t.post_processor = p


RECIPES = {
    "wordpiece-bert": bert_wordpiece,
    "wordpiece-cased": wordpiece_cased,
    "wordlevel-whitespace": wordlevel_whitespace,
    "wordlevel-split": wordlevel_split,
    "unigram-t5": unigram_t5,
    "unigram-bytefallback": unigram_bytefallback,
    "unigram-scripts": unigram_scripts,
    "bpe-roberta": bpe_roberta,
    "bpe-suffix": bpe_suffix,
    "bpe-prefix": bpe_prefix,
}


def with_byte_fallback(t):
    """The trainer has no byte_fallback option: add the 256 <0xNN> pieces
    (score 0, as SentencePiece's byte pieces) and switch it on in the model."""
    j = json.loads(t.to_str())
    j["model"]["vocab"] += [[f"<0x{b:02X}>", 0.0] for b in range(256)]
    j["model"]["byte_fallback"] = True
    return Tokenizer.from_str(json.dumps(j))


def build(name):
    t, tr, post, dec = RECIPES[name]()
    t.train([str(CORPUS)], tr)
    if name == "unigram-bytefallback":
        t = with_byte_fallback(t)
    if post:
        post(t)
    if dec:
        t.decoder = dec
    return t


def write(out: pathlib.Path):
    import tokenizers

    texts = [json.loads(l)["text"] for l in TEXTS.read_text().splitlines()]
    manifest = [f"trained with Hugging Face tokenizers {tokenizers.__version__} on corpus/calib.txt by interop/gen_tokenizers.py", ""]
    for name in RECIPES:
        d = out / name
        d.mkdir(parents=True, exist_ok=True)
        t = build(name)
        t.save(str(d / "tokenizer.json"), pretty=False)
        t = Tokenizer.from_file(str(d / "tokenizer.json"))
        for special, fname in ((False, "public.jsonl"), (True, "public.special.jsonl")):
            with open(d / fname, "w") as f:
                for enc in t.encode_batch(texts, add_special_tokens=special):
                    rec = {"ids": enc.ids}
                    if not special:
                        rec["tokens"] = enc.tokens
                        rec["decoded"] = t.decode(enc.ids, skip_special_tokens=False)
                    f.write(json.dumps(rec, ensure_ascii=False).replace("\u2028", "\\u2028").replace("\u2029", "\\u2029").replace("\u0085", "\\u0085") + "\n")
        for fname in ("tokenizer.json", "public.jsonl", "public.special.jsonl"):
            manifest.append(f"{hashlib.sha256((d / fname).read_bytes()).hexdigest()}  {name}/{fname}")
    (out / "MANIFEST.txt").write_text("\n".join(manifest) + "\n")


if __name__ == "__main__":
    write(pathlib.Path(sys.argv[1]) if len(sys.argv) > 1 else REPO / "testdata" / "tokenizers" / "trained")
