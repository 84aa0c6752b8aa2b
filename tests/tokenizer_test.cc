// Tokenizers against fixtures in tests/data/tokenizers (written by
// tools/make_tokenizer_fixtures.py). The hand-written ones' expected ids are
// derived below from their vocabularies and merges; the SentencePiece ones
// come from the SentencePiece library itself (python3-sentencepiece).
#include "autoshard/io/tokenizer.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <functional>
#include <nlohmann/json.hpp>

#include "autoshard/error.h"

namespace autoshard {
namespace {

const std::string kData = std::string(AUTOSHARD_TEST_DATA) + "/tokenizers/";

using Ids = std::vector<int32_t>;

Ids ids_of(const Tokenizer& t, const std::string& text) {
  return t.encode(text, false);
}

// The multilingual sweep of the SentencePiece fixture (accents, CJK, emoji
// with joiners and flags, right-to-left scripts, runs of whitespace).
std::vector<std::string> sweep_texts() {
  std::ifstream in(kData + "sentencepiece/expected.json");
  std::vector<std::string> texts;
  for (const auto& e : nlohmann::json::parse(in)) texts.push_back(e.at("text"));
  return texts;
}

// Printing each push of a TextStream prints the whole decoded text, even
// where a character's bytes are spread over several tokens.
std::string streamed(const Tokenizer& t, const Ids& ids) {
  TextStream stream(t);
  std::string out;
  for (int32_t id : ids) out += stream.push(id);
  return out;
}

// GPT-2's kind. Ids 0-255 are the byte-level alphabet in GPT-2's order
// ('!' = 0 ... '~' = 93, so a printable ASCII c is c - 33; "Ġ" (space) =
// 220, "Ċ" (newline) = 198); merges number from 256 in file order:
// Ġt 256, he 257, Ġthe 258, Ġw 259, or 260, Ġwor 261, ld 262, Ġworld 263,
// ll 264, ell 265, Hell 266, Hello 267, 's 268, ĠĠ 269; <|endoftext|> 270.
void expect_gpt2_encodings(const Tokenizer& t) {
  // "Hello": H e l l o -> the only pair with a merge is (l,l) -> H e ll o ->
  // (e,ll) -> H ell o -> (H,ell) -> Hell o -> (Hell,o) -> Hello.
  // " world": Ġ w o r l d; ranks Ġw 3 < or 4 < ld 6: Ġw or l d -> Ġwor
  // (rank 5, before ld) -> Ġwor ld -> Ġworld.
  EXPECT_EQ(ids_of(t, "Hello world"), (Ids{267, 263}));
  // GPT-2's expression cuts "the", " world", "'s", " end"; "the" has no
  // merge for (t, he) (only Ġt he), and " end" none at all.
  EXPECT_EQ(ids_of(t, "the world's end"),
            (Ids{'t' - 33, 257, 263, 268, 220, 'e' - 33, 'n' - 33, 'd' - 33}));
  // Whitespace before a word keeps one space for the word (" b"), the rest is
  // its own piece; a trailing run is one piece, so ĠĠ merges there only.
  EXPECT_EQ(ids_of(t, "a  b\n"), (Ids{'a' - 33, 220, 220, 'b' - 33, 198}));
  EXPECT_EQ(ids_of(t, "x\n\n  "), (Ids{'x' - 33, 198, 198, 269}));
  // "é" is the bytes C3 A9: printable Latin-1, so ids 94 + 12 + (0xC3 - 0xAE)
  // = 127 and 94 + (0xA9 - 0xA1) = 102.
  EXPECT_EQ(ids_of(t, "é"), (Ids{127, 102}));
  // The special token is cut out before the expression runs.
  EXPECT_EQ(ids_of(t, "Hello<|endoftext|> world"), (Ids{267, 270, 263}));
  EXPECT_EQ(t.decode(Ids{267, 270, 263}), "Hello world");
  EXPECT_EQ(t.decode(Ids{267, 270, 263}, false), "Hello<|endoftext|> world");
  EXPECT_EQ(t.encode("Hello"), (Ids{267}));  // no template: nothing added
  EXPECT_EQ(t.vocab_size(), 271);
  EXPECT_EQ(t.token_to_id("Ġworld"), 263);
  EXPECT_EQ(t.id_to_token(269), "ĠĠ");
}

TEST(Tokenizer, ByteLevelBpeOfGpt2sKind) {
  expect_gpt2_encodings(*load_tokenizer(kData + "byte_bpe"));
}

TEST(Tokenizer, Gpt2VocabAndMergesFiles) {
  expect_gpt2_encodings(*load_tokenizer(kData + "gpt2_files"));
}

// Llama 3's kind: its expression (case-insensitive contractions, numbers in
// groups of three, one non-letter before letters), byte-level without GPT-2's
// expression, ignore_merges, a BOS template. Merges: Ġw 256, or 257, Ġwor 258,
// ld 259, Ġworld 260; whole-piece entries 123 261, Ġhello 262, 'T 263;
// <|begin_of_text|> 264, <|end_of_text|> 265.
TEST(Tokenizer, ByteLevelBpeOfLlama3sKind) {
  const auto t = load_tokenizer(kData + "llama3_bpe");
  // Pieces: "DON" "'T" " say" " hello" " world" " " "123" "45". "'T" and
  // "Ġhello" have no merges: only ignore_merges finds them whole; "Ġworld"
  // is found whole too (the merges would give the same).
  EXPECT_EQ(t->encode("DON'T say hello world 12345"),
            (Ids{264, 'D' - 33, 'O' - 33, 'N' - 33, 263, 220, 's' - 33, 'a' - 33, 'y' - 33, 262,
                 260, 220, 261, '4' - 33, '5' - 33}));
  EXPECT_EQ(t->encode("<|begin_of_text|>hello", false),
            (Ids{264, 'h' - 33, 'e' - 33, 'l' - 33, 'l' - 33, 'o' - 33}));
  EXPECT_EQ(t->decode(Ids{264, 262, 260, 265}), " hello world");
  EXPECT_EQ(t->decode(Ids{264, 262, 260, 265}, false),
            "<|begin_of_text|> hello world<|end_of_text|>");
}

// BERT's kind: lowercase, accents stripped, CJK ideographs split apart,
// punctuation isolated; WordPiece's longest-first pieces, "##" after the first.
// Ids: [PAD] 0 [UNK] 1 [CLS] 2 [SEP] 3 [MASK] 4 un 5 ##aff 6 ##able 7 hello 8
// world 9 ##s 10 ! 11 , 12 . 13 ' 14 t 15 don 16 cafe 17 的 18 中 19 文 20
// a 21 ##b 22 ##c 23.
void expect_bert_encodings(const Tokenizer& t) {
  EXPECT_EQ(t.encode("Unaffable Worlds!"), (Ids{2, 5, 6, 7, 9, 10, 11, 3}));
  EXPECT_EQ(t.encode("Héllo, CAFÉ don't 中文的"), (Ids{2, 8, 12, 17, 16, 14, 15, 19, 20, 18, 3}));
  // "abd": a ##b, then no "##d": the whole word is [UNK].
  EXPECT_EQ(t.encode("abc abd xyz"), (Ids{2, 21, 22, 23, 1, 1, 3}));
  EXPECT_EQ(t.encode("[CLS] hello [MASK]", false), (Ids{2, 8, 4}));
  EXPECT_EQ(t.decode(Ids{2, 5, 6, 7, 9, 10, 11, 3}), "unaffable worlds!");
}

TEST(Tokenizer, WordPieceOfBertsKind) {
  expect_bert_encodings(*load_tokenizer(kData + "wordpiece"));
}

TEST(Tokenizer, BertVocabTxt) {
  expect_bert_encodings(*load_tokenizer(kData + "wordpiece_files"));
}

// A byte-fallback BPE model trained by SentencePiece (Llama 2's settings):
// the library's own ids, through tokenizer.model and through the two ways
// Hugging Face writes such a model as tokenizer.json.
TEST(Tokenizer, SentencePieceAndItsTokenizerJsonMatchTheLibrary) {
  const std::string dir = kData + "sentencepiece/";
  const auto model = load_sentencepiece_tokenizer(dir + "tokenizer.model");
  const auto legacy = load_hf_tokenizer(dir + "legacy.json");
  const auto metaspace = load_hf_tokenizer(dir + "metaspace.json");
  std::ifstream in(dir + "expected.json");
  int checked = 0, byte_fallbacks = 0;
  for (const auto& e : nlohmann::json::parse(in)) {
    const std::string text = e.at("text");
    const Ids expected = e.at("ids");
    SCOPED_TRACE(text);
    EXPECT_EQ(model->encode(text), expected);
    EXPECT_EQ(legacy->encode(text), expected);
    // Metaspace does not add its space marker before one that is there
    // already, where SentencePiece does: texts that begin with a space differ.
    if (!text.starts_with(' ')) {
      EXPECT_EQ(metaspace->encode(text), expected);
    }
    for (const auto* t : {model.get(), legacy.get(), metaspace.get()})
      EXPECT_EQ(t->decode(expected), text);
    for (int32_t id : expected) byte_fallbacks += legacy->id_to_token(id).starts_with("<0x");
    ++checked;
  }
  EXPECT_GE(checked, 12);
  EXPECT_GT(byte_fallbacks, 10);  // the sweep reaches characters the model lacks
}

TEST(Tokenizer, DecodeOfEncodeIsTheTextOverAMultilingualSweep) {
  const std::string sp = kData + "sentencepiece/";
  std::vector<std::unique_ptr<Tokenizer>> all;
  all.push_back(load_tokenizer(kData + "byte_bpe"));
  all.push_back(load_tokenizer(kData + "llama3_bpe"));
  all.push_back(load_sentencepiece_tokenizer(sp + "tokenizer.model"));
  all.push_back(load_hf_tokenizer(sp + "legacy.json"));
  for (const auto& t : all) {
    for (const std::string& text : sweep_texts()) {
      SCOPED_TRACE(text);
      EXPECT_EQ(t->decode(t->encode(text)), text);
      EXPECT_EQ(streamed(*t, t->encode(text, false)), text);
    }
  }
}

TEST(Tokenizer, StreamHoldsBackIncompleteCharactersAndKeepsSpaces) {
  const auto t = load_hf_tokenizer(kData + "sentencepiece/legacy.json");
  // "🙂" is not in the model: "▁" then four byte tokens, printed once all
  // four have come.
  const Ids emoji = t->encode("🙂", false);
  ASSERT_GE(emoji.size(), 4u);
  TextStream stream(*t);
  std::string out;
  for (size_t i = 0; i < emoji.size(); ++i) {
    const std::string piece = stream.push(emoji[i]);
    if (i + 1 < emoji.size()) {
      EXPECT_EQ(piece, "") << "after token " << i;
    }
    out += piece;
  }
  EXPECT_EQ(out, "🙂");
  // A continuation after a prompt keeps the space its first token carries.
  const Ids prompt = t->encode("Hello");
  TextStream after(*t, prompt);
  std::string continuation;
  for (int32_t id : t->encode(" world", false)) continuation += after.push(id);
  EXPECT_EQ(continuation, "  world");  // the encoder's dummy prefix plus the space
}

// Added tokens: the longest one at a place wins; single_word ones only
// where no word character touches them; lstrip/rstrip swallow spaces.
TEST(Tokenizer, AddedTokensLongestFirstAndStandingAlone) {
  std::ifstream in(kData + "byte_bpe/tokenizer.json");
  nlohmann::json j = nlohmann::json::parse(in);
  const auto add = [&](const std::string& content, int id, bool single_word = false,
                       bool lstrip = false) {
    j["added_tokens"].push_back(
        {{"content", content}, {"id", id}, {"single_word", single_word}, {"lstrip", lstrip}});
  };
  add("<a>", 300);
  add("<a>b", 301);
  add("<", 302);
  add("ab", 303, /*single_word=*/true);
  add("é!", 304, /*single_word=*/true, /*lstrip=*/true);
  const std::string dir = ::testing::TempDir() + "autoshard_tokenizer_added/";
  std::filesystem::create_directories(dir);
  std::ofstream(dir + "tokenizer.json") << j.dump();
  const auto t = load_tokenizer(dir);
  EXPECT_EQ(ids_of(*t, "<a>b<a><"), (Ids{301, 300, 302}));
  EXPECT_EQ(ids_of(*t, "<a>c"), (Ids{300, 'c' - 33}));
  // "ab" alone is the token; inside "xab" or "abc" it is not ("é" is a word
  // character, "," is not).
  EXPECT_EQ(ids_of(*t, "ab,xab"), (Ids{303, ',' - 33, 'x' - 33, 'a' - 33, 'b' - 33}));
  EXPECT_EQ(ids_of(*t, "éab"), (Ids{127, 102, 'a' - 33, 'b' - 33}));
  // A two-byte character before a standalone token; lstrip takes the spaces.
  EXPECT_EQ(ids_of(*t, ",  é!"), (Ids{',' - 33, 304}));
  EXPECT_EQ(ids_of(*t, "xé!"), (Ids{'x' - 33, 127, 102, '!' - 33}));
}

// Text files are tokenized a piece at a time; pieces end at line ends where
// GPT-2's and Llama 3's expressions cut anyway, so these byte-level
// tokenizers give the ids of the whole text at once (blank lines, spaces
// before line ends and long lines included).
TEST(Tokenizer, TextFilesInPiecesGiveTheWholeTextsIds) {
  std::string text;
  for (int i = 0; text.size() < (size_t{900} << 10); ++i) {
    text += "Hello world's end, " + std::to_string(i * 7919) + "  café 日本" +
            (i % 3 == 0 ? " \n\n" : "\n");
    if (i % 1000 == 0) text += std::string(300000, 'x') + "\n";
  }
  const std::string file = ::testing::TempDir() + "autoshard_tokenizer_text.txt";
  std::ofstream(file) << text;
  for (const char* kind : {"byte_bpe", "llama3_bpe"}) {
    SCOPED_TRACE(kind);
    const auto t = load_tokenizer(kData + kind);
    EXPECT_EQ(encode_text_file(*t, file, "--data"), t->encode(text));
  }
}

TEST(Tokenizer, BadInputGetsClearErrors) {
  const auto message = [](const std::function<void()>& f) {
    try {
      f();
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  EXPECT_NE(message([] { load_tokenizer("/nonexistent/dir"); }).find("has no tokenizer"),
            std::string::npos);
  const std::string dir = ::testing::TempDir() + "autoshard_tokenizer_bad/";
  std::filesystem::create_directories(dir);
  const auto write = [&](const std::string& text) {
    std::ofstream(dir + "tokenizer.json") << text;
  };
  write("{not json");
  EXPECT_NE(message([&] { load_tokenizer(dir); }).find("is not valid JSON"), std::string::npos);
  write(R"({"model": {"type": "Unigram", "vocab": []}})");
  EXPECT_NE(message([&] { load_tokenizer(dir); }).find("model type 'Unigram' is not supported"),
            std::string::npos);
  write(R"({"model": {"type": "BPE", "vocab": {"a": 0}, "merges": ["a b"]}})");
  EXPECT_NE(
      message([&] { load_tokenizer(dir); }).find("uses a token that is not in the vocabulary"),
      std::string::npos);
  write(R"({"normalizer": {"type": "Precompiled"}, "model": {"type": "WordLevel", "vocab": {}}})");
  EXPECT_NE(message([&] { load_tokenizer(dir); }).find("normalizer type 'Precompiled'"),
            std::string::npos);
  // A character the vocabulary lacks, with no unknown token and no byte
  // fallback, is an error rather than silently dropped.
  write(R"({"model": {"type": "BPE", "vocab": {"a": 0}, "merges": []}})");
  EXPECT_NE(
      message([&] { load_tokenizer(dir)->encode("ab"); }).find("'b' is not in the vocabulary"),
      std::string::npos);
  EXPECT_NE(message([&] {
              load_tokenizer(kData + "byte_bpe")->decode(Ids{5000});
            }).find("token id 5000 is not in the tokenizer's vocabulary of 271"),
            std::string::npos);
  EXPECT_NE(message([&] {
              load_sentencepiece_tokenizer(kData + "byte_bpe/tokenizer.json");
            }).find("is not a SentencePiece model"),
            std::string::npos);
}

}  // namespace
}  // namespace autoshard
