// Post-processors of tokenizer.json ("post_processor"): the special tokens a
// model expects around a sequence (Llama's BOS, BERT's [CLS] ... [SEP]).
#include "autoshard/error.h"
#include "io/tokenizer/pipeline.h"

namespace autoshard::tokenizer {
namespace {

// TemplateProcessing's "single": SpecialToken items stand for the ids of
// "special_tokens"; the Sequence item for the text's ids.
PostProcessor template_processing(const Json& j, const std::string& where) {
  std::vector<std::vector<int32_t>> before, after;
  bool seen_sequence = false;
  for (const Json& item : j.at("single")) {
    if (item.contains("Sequence")) {
      seen_sequence = true;
      continue;
    }
    AS_CHECK(item.contains("SpecialToken"), where,
             ": a TemplateProcessing item is neither SpecialToken nor Sequence");
    const std::string name = item["SpecialToken"].at("id");
    const Json& special = j.at("special_tokens");
    AS_CHECK(special.contains(name), where, ": template token '", name,
             "' is missing from special_tokens");
    (seen_sequence ? after : before).push_back(special[name].at("ids").get<std::vector<int32_t>>());
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
PostProcessor wrap(const Json& j) {
  const int32_t cls = j.at("cls").at(1), sep = j.at("sep").at(1);
  return [cls, sep](std::vector<int32_t> ids) {
    ids.insert(ids.begin(), cls);
    ids.push_back(sep);
    return ids;
  };
}

}  // namespace

PostProcessor make_post_processor(const Json& j, const std::string& where) {
  if (j.is_null() || j.value("type", "") == "ByteLevel")  // ByteLevel only trims offsets
    return [](std::vector<int32_t> ids) { return ids; };
  const std::string type = j.value("type", "");
  if (type == "Sequence") {
    std::vector<PostProcessor> parts;
    for (const Json& p : j.at("processors")) parts.push_back(make_post_processor(p, where));
    return [parts](std::vector<int32_t> ids) {
      for (const PostProcessor& p : parts) ids = p(std::move(ids));
      return ids;
    };
  }
  if (type == "TemplateProcessing") return template_processing(j, where);
  if (type == "BertProcessing" || type == "RobertaProcessing") return wrap(j);
  fail(where, ": post_processor type '", type,
       "' is not supported (supported: TemplateProcessing, BertProcessing, RobertaProcessing, "
       "ByteLevel, Sequence)");
}

}  // namespace autoshard::tokenizer
