// A small writer of HTML and inline SVG for autoshard's self-contained pages
// (plan --html, report --html): elements are opened and closed through it,
// so every element is closed in order, and every text and attribute value
// is escaped (names come from models and logs: a weight may be called
// "<script>"). No scripts, no network: the pages are plain markup and CSS.
#pragma once

#include <initializer_list>
#include <string>
#include <utility>
#include <vector>

namespace autoshard {

// `s` with & < > " ' replaced by their character references (text and
// attribute values alike).
std::string html_escape(const std::string& s);

// A number for SVG coordinates: at most two decimals, no exponent.
std::string svg_number(double v);

class HtmlWriter {
 public:
  using Attributes = std::vector<std::pair<std::string, std::string>>;

  // <tag a="v" ...>; the element stays open until close().
  HtmlWriter& open(const std::string& tag, const Attributes& attributes = {});
  // </tag> of the innermost open element.
  HtmlWriter& close();
  // <tag ...>text</tag> (text escaped).
  HtmlWriter& element(const std::string& tag, const Attributes& attributes,
                      const std::string& text = "");
  // Escaped text inside the open element.
  HtmlWriter& text(const std::string& s);
  // Markup written as it is: only for constant strings of our own (the CSS).
  HtmlWriter& raw(const std::string& s);
  // The document; throws autoshard::Error if an element is still open.
  std::string str() const;
  int depth() const { return int(open_.size()); }

 private:
  void start_tag(const std::string& tag, const Attributes& attributes);

  std::string out_;
  std::vector<std::string> open_;
};

}  // namespace autoshard
