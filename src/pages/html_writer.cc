#include "pages/html_writer.h"

#include <cmath>
#include <cstdio>

#include "autoshard/error.h"

namespace autoshard {

std::string html_escape(const std::string& s) {
  std::string out;
  out.reserve(s.size());
  for (char c : s) switch (c) {
      case '&':
        out += "&amp;";
        break;
      case '<':
        out += "&lt;";
        break;
      case '>':
        out += "&gt;";
        break;
      case '"':
        out += "&quot;";
        break;
      case '\'':
        out += "&#39;";
        break;
      default:
        out += c;
    }
  return out;
}

std::string svg_number(double v) {
  if (!std::isfinite(v)) v = 0;  // a coordinate never carries NaN into the page
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.2f", v);
  std::string s = buf;
  while (s.back() == '0') s.pop_back();
  if (s.back() == '.') s.pop_back();
  return s == "-0" ? "0" : s;
}

void HtmlWriter::start_tag(const std::string& tag, const Attributes& attributes) {
  out_ += '<';
  out_ += tag;
  for (const auto& [name, value] : attributes)
    out_ += ' ' + name + "=\"" + html_escape(value) + '"';
  out_ += '>';
}

HtmlWriter& HtmlWriter::open(const std::string& tag, const Attributes& attributes) {
  start_tag(tag, attributes);
  open_.push_back(tag);
  return *this;
}

HtmlWriter& HtmlWriter::close() {
  AS_CHECK(!open_.empty(), "HtmlWriter: close() with no open element");
  out_ += "</" + open_.back() + ">";
  // A new line after block-sized elements keeps the page readable as text.
  if (open_.back() != "span" && open_.back() != "tspan" && open_.back() != "code") out_ += '\n';
  open_.pop_back();
  return *this;
}

HtmlWriter& HtmlWriter::element(const std::string& tag, const Attributes& attributes,
                                const std::string& text) {
  start_tag(tag, attributes);
  out_ += html_escape(text) + "</" + tag + ">";
  return *this;
}

HtmlWriter& HtmlWriter::text(const std::string& s) {
  out_ += html_escape(s);
  return *this;
}

HtmlWriter& HtmlWriter::raw(const std::string& s) {
  out_ += s;
  return *this;
}

std::string HtmlWriter::str() const {
  AS_CHECK(open_.empty(), "HtmlWriter: <", open_.empty() ? "" : open_.back(), "> is still open");
  return out_;
}

}  // namespace autoshard
