// A small well-formedness check of the pages autoshard writes (plan --html,
// report --html), for the tests: every '<' starts a tag, a comment or the
// doctype; every element opened is closed, in order (void elements: meta,
// br); a <style> element's text holds no '<'; attribute values are quoted
// and hold no raw '<' or quote. Returns "" or what is wrong and where.
#pragma once

#include <cctype>
#include <set>
#include <string>
#include <vector>

namespace autoshard::testing {

inline std::string html_problem(const std::string& page) {
  static const std::set<std::string> kVoid = {"meta", "br", "hr", "img", "link", "input"};
  std::vector<std::string> open;
  size_t i = 0;
  auto where = [&](size_t at) { return " at byte " + std::to_string(at); };
  while ((i = page.find('<', i)) != std::string::npos) {
    if (page.compare(i, 9, "<!DOCTYPE") == 0 || page.compare(i, 4, "<!--") == 0) {
      i = page.find('>', i);
      if (i == std::string::npos) return "an unclosed doctype or comment";
      continue;
    }
    const bool closing = i + 1 < page.size() && page[i + 1] == '/';
    size_t k = i + (closing ? 2 : 1);
    if (k >= page.size() || !std::isalpha(static_cast<unsigned char>(page[k])))
      return "a stray '<'" + where(i);
    const size_t name_end = page.find_first_of(" >/", k);
    if (name_end == std::string::npos) return "an unfinished tag" + where(i);
    const std::string name = page.substr(k, name_end - k);
    // Attributes: name="value" pairs up to '>'.
    size_t j = name_end;
    while (j < page.size() && page[j] != '>') {
      if (page[j] == '"') {
        const size_t end = page.find('"', j + 1);
        if (end == std::string::npos) return "an unclosed attribute value" + where(j);
        if (page.substr(j + 1, end - j - 1).find('<') != std::string::npos)
          return "a raw '<' in an attribute value" + where(j);
        j = end + 1;
        continue;
      }
      if (page[j] == '<') return "a '<' inside a tag" + where(j);
      ++j;
    }
    if (j >= page.size()) return "an unfinished tag" + where(i);
    const bool self_closing = page[j - 1] == '/';
    i = j + 1;
    if (closing) {
      if (open.empty() || open.back() != name)
        return "</" + name + "> closes " + (open.empty() ? "nothing" : "<" + open.back() + ">") +
               where(i);
      open.pop_back();
    } else if (!self_closing && !kVoid.count(name)) {
      open.push_back(name);
      if (name == "style" || name == "script" || name == "title") {
        const size_t end = page.find("</" + name + ">", i);
        if (end == std::string::npos) return "<" + name + "> never closed";
        if (page.substr(i, end - i).find('<') != std::string::npos)
          return "a '<' inside <" + name + ">" + where(i);
        i = end;
      }
    }
  }
  if (!open.empty()) return "<" + open.back() + "> never closed";
  return "";
}

}  // namespace autoshard::testing
