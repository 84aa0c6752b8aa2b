// Post-processors of tokenizer.json ("post_processor"): the special tokens a
// model expects around a sequence (Llama's BOS, BERT's [CLS] ... [SEP]).
#include "autoshard/error.h"
#include "io/tokenizer/pipeline.h"

namespace autoshard::tokenizer {
namespace {

// An id the template adds: one the tokenizer can decode.
int32_t token_id(const JsonField& id, int64_t vocab_size) {
  return static_cast<int32_t>(id.integer(0, vocab_size - 1));
}

// TemplateProcessing's "single": SpecialToken items stand for the ids of
// "special_tokens"; the Sequence item for the text's ids.
PostProcessor template_processing(const JsonField& j, int64_t vocab_size) {
  std::vector<std::vector<int32_t>> before, after;
  bool seen_sequence = false;
  const JsonField special = j["special_tokens"];
  for (const JsonField& item : j["single"].elements()) {
    if (item.has("Sequence")) {
      seen_sequence = true;
      continue;
    }
    AS_CHECK(item.has("SpecialToken"), item.where(), " is neither SpecialToken nor Sequence");
    const std::string name = item["SpecialToken"]["id"].string();
    AS_CHECK(special.has(name), item.where(), ": template token '", name, "' is missing from ",
             special.path());
    std::vector<int32_t> ids;
    for (const JsonField& id : special[name]["ids"].elements())
      ids.push_back(token_id(id, vocab_size));
    (seen_sequence ? after : before).push_back(std::move(ids));
  }
  return [before, after](std::vector<int32_t> ids) {
    std::vector<int32_t> out;
    for (const auto& s : before) out.insert(out.end(), s.begin(), s.end());
    out.insert(out.end(), ids.begin(), ids.end());
    for (const auto& s : after) out.insert(out.end(), s.begin(), s.end());
    return out;
  };
}

// BertProcessing and RobertaProcessing: [cls] ids [sep], each given as
// [token, id].
PostProcessor wrap(const JsonField& j, int64_t vocab_size) {
  const auto id_of = [&](const char* key) {
    const std::vector<JsonField> pair = j[key].elements();
    if (pair.size() != 2) j[key].fail_type("a pair [token, id]");
    return token_id(pair[1], vocab_size);
  };
  const int32_t cls = id_of("cls"), sep = id_of("sep");
  return [cls, sep](std::vector<int32_t> ids) {
    ids.insert(ids.begin(), cls);
    ids.push_back(sep);
    return ids;
  };
}

}  // namespace

PostProcessor make_post_processor(const JsonField& j, int64_t vocab_size) {
  if (j.is_null() || j.type() == "ByteLevel")  // ByteLevel only trims offsets
    return [](std::vector<int32_t> ids) { return ids; };
  const std::string type = j.type();
  if (type == "Sequence") {
    std::vector<PostProcessor> parts;
    for (const JsonField& p : j["processors"].elements())
      parts.push_back(make_post_processor(p, vocab_size));
    // Moved, not copied: a copy of nested stages would copy all of them.
    return [parts = std::move(parts)](std::vector<int32_t> ids) {
      for (const PostProcessor& p : parts) ids = p(std::move(ids));
      return ids;
    };
  }
  if (type == "TemplateProcessing") return template_processing(j, vocab_size);
  if (type == "BertProcessing" || type == "RobertaProcessing") return wrap(j, vocab_size);
  fail(j.where(), ": post_processor type '", type,
       "' is not supported (supported: TemplateProcessing, BertProcessing, RobertaProcessing, "
       "ByteLevel, Sequence)");
}

}  // namespace autoshard::tokenizer
