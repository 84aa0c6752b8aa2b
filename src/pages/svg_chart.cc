#include "pages/svg_chart.h"

#include <algorithm>
#include <cmath>
#include <cstdio>

namespace autoshard {
namespace {

// Round tick values spanning [lo, hi]: steps of 1, 2 or 5 times a power of ten.
std::vector<double> ticks(double lo, double hi, int wanted) {
  if (!(hi > lo)) hi = lo + 1;
  const double raw = (hi - lo) / std::max(1, wanted);
  const double power = std::pow(10.0, std::floor(std::log10(raw)));
  double step = power;
  for (double m : {1.0, 2.0, 5.0, 10.0})
    if (m * power >= raw) {
      step = m * power;
      break;
    }
  std::vector<double> out;
  for (double t = std::ceil(lo / step) * step; t <= hi + step * 1e-9 && out.size() < 50; t += step)
    out.push_back(std::abs(t) < step * 1e-9 ? 0 : t);
  return out;
}

using A = HtmlWriter::Attributes;

void legend(HtmlWriter& w, const std::vector<ChartSeries>& series, double x, double y) {
  for (size_t k = 0; k < series.size(); ++k) {
    const double row = y + 16 * double(k);
    w.element("line", {{"x1", svg_number(x)},
                       {"y1", svg_number(row - 4)},
                       {"x2", svg_number(x + 18)},
                       {"y2", svg_number(row - 4)},
                       {"stroke", series[k].colour},
                       {"stroke-width", "2.5"},
                       {"stroke-dasharray", series[k].dashed ? "5 3" : "none"}});
    w.element("text", {{"x", svg_number(x + 24)}, {"y", svg_number(row)}, {"class", "legend"}},
              series[k].name);
  }
}

}  // namespace

std::string chart_colour(int k) {
  static const char* const kTen[] = {"#4e79a7", "#f28e2b", "#e15759", "#76b7b2", "#59a14f",
                                     "#edc948", "#b07aa1", "#ff9da7", "#9c755f", "#bab0ac"};
  if (k >= 0 && k < 10) return kTen[k];
  char buf[48];
  std::snprintf(buf, sizeof buf, "hsl(%d,55%%,%d%%)", (k * 137) % 360, 45 + (k % 3) * 10);
  return buf;
}

std::string format_seconds(double s) {
  char buf[32];
  if (s >= 1)
    std::snprintf(buf, sizeof buf, "%.3g s", s);
  else if (s >= 1e-3)
    std::snprintf(buf, sizeof buf, "%.3g ms", s * 1e3);
  else
    std::snprintf(buf, sizeof buf, "%.3g us", s * 1e6);
  return buf;
}

std::string format_mib(double bytes) {
  char buf[32];
  if (bytes >= 1073741824.0)
    std::snprintf(buf, sizeof buf, "%.2f GiB", bytes / 1073741824.0);
  else
    std::snprintf(buf, sizeof buf, "%.3g MiB", bytes / 1048576.0);
  return buf;
}

std::string format_number(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.3g", v);
  return buf;
}

void write_line_chart(HtmlWriter& w, const LineChart& c) {
  const double width = 640, height = 300, left = 78, right = 170, top = 30, bottom = 44;
  const double pw = width - left - right, ph = height - top - bottom;
  double x0 = INFINITY, x1 = -INFINITY, y0 = INFINITY, y1 = -INFINITY;
  for (const ChartSeries& s : c.series)
    for (const auto& [x, y] : s.points) {
      if (!std::isfinite(x) || !std::isfinite(y)) continue;
      x0 = std::min(x0, x), x1 = std::max(x1, x);
      y0 = std::min(y0, y), y1 = std::max(y1, y);
    }
  w.open("svg", {{"class", "chart"},
                 {"width", svg_number(width)},
                 {"height", svg_number(height)},
                 {"viewBox", "0 0 " + svg_number(width) + " " + svg_number(height)},
                 {"role", "img"}});
  w.element("text", {{"x", svg_number(left)}, {"y", "18"}, {"class", "title"}}, c.title);
  if (!std::isfinite(x0)) {
    w.element("text", {{"x", svg_number(left)}, {"y", svg_number(top + ph / 2)}}, "no data");
    w.close();
    return;
  }
  if (c.y_from_zero) y0 = std::min(0.0, y0);
  if (y1 == y0) y1 = y0 + (y0 == 0 ? 1 : std::abs(y0) * 0.1), y0 -= (y1 - y0);
  if (x1 == x0) x1 = x0 + 1;
  const double pad = (y1 - y0) * 0.05;
  if (!c.y_from_zero || y0 < 0) y0 -= pad;
  y1 += pad;
  auto px = [&](double x) { return left + (x - x0) / (x1 - x0) * pw; };
  auto py = [&](double y) { return top + ph - (y - y0) / (y1 - y0) * ph; };
  for (double t : ticks(y0, y1, 5)) {
    w.element("line", {{"x1", svg_number(left)},
                       {"x2", svg_number(left + pw)},
                       {"y1", svg_number(py(t))},
                       {"y2", svg_number(py(t))},
                       {"class", "grid"}});
    w.element("text",
              {{"x", svg_number(left - 6)}, {"y", svg_number(py(t) + 4)}, {"class", "ytick"}},
              c.y_format ? c.y_format(t) : format_number(t));
  }
  for (double t : ticks(x0, x1, 6))
    w.element("text",
              {{"x", svg_number(px(t))}, {"y", svg_number(top + ph + 16)}, {"class", "xtick"}},
              format_number(t));
  w.element("rect", {{"x", svg_number(left)},
                     {"y", svg_number(top)},
                     {"width", svg_number(pw)},
                     {"height", svg_number(ph)},
                     {"class", "frame"}});
  w.element("text",
            {{"x", svg_number(left + pw / 2)}, {"y", svg_number(height - 6)}, {"class", "xlabel"}},
            c.x_label);
  w.element("text",
            {{"x", "14"},
             {"y", svg_number(top + ph / 2)},
             {"class", "ylabel"},
             {"transform", "rotate(-90 14 " + svg_number(top + ph / 2) + ")"}},
            c.y_label);
  for (const ChartSeries& s : c.series) {
    std::string points;
    int n = 0;
    for (const auto& [x, y] : s.points) {
      if (!std::isfinite(x) || !std::isfinite(y)) continue;
      // Appended piece by piece: GCC 12 warns falsely (-Wrestrict) on "x" + a temporary.
      if (!points.empty()) points += ' ';
      points += svg_number(px(x));
      points += ',';
      points += svg_number(py(y));
      ++n;
    }
    A a = {{"data-series", s.name}, {"data-points", std::to_string(n)},
           {"points", points},      {"fill", "none"},
           {"stroke", s.colour},    {"stroke-width", "1.8"}};
    if (s.dashed) a.emplace_back("stroke-dasharray", "5 3");
    w.open("polyline", a).element("title", {}, s.name).close();
    // A lone point draws no line: mark it.
    if (n == 1)
      w.element("circle", {{"cx", svg_number(px(s.points[0].first))},
                           {"cy", svg_number(py(s.points[0].second))},
                           {"r", "3"},
                           {"fill", s.colour}});
  }
  legend(w, c.series, left + pw + 14, top + 10);
  w.close();
}

void write_bar_chart(HtmlWriter& w, const BarChart& c) {
  const double row = 22, left = 190, bar_width = 300, top = 28;
  const double height = top + row * double(std::max<size_t>(1, c.bars.size())) + 8;
  double most = 0;
  for (const auto& b : c.bars) most = std::max(most, b.second);
  w.open("svg", {{"class", "chart"},
                 {"width", "640"},
                 {"height", svg_number(height)},
                 {"viewBox", "0 0 640 " + svg_number(height)},
                 {"role", "img"}});
  w.element("text", {{"x", "4"}, {"y", "18"}, {"class", "title"}}, c.title);
  if (c.bars.empty())
    w.element("text", {{"x", svg_number(left)}, {"y", svg_number(top + 14)}}, "none");
  for (size_t k = 0; k < c.bars.size(); ++k) {
    const auto& [label, value] = c.bars[k];
    const double y = top + row * double(k);
    const double len = most > 0 ? std::max(1.0, value / most * bar_width) : 1.0;
    w.element("text", {{"x", svg_number(left - 8)}, {"y", svg_number(y + 14)}, {"class", "ytick"}},
              label);
    A a = {{"x", svg_number(left)},
           {"y", svg_number(y + 3)},
           {"width", svg_number(len)},
           {"height", svg_number(row - 6)},
           {"fill", c.colour}};
    if (!c.data_kind.empty()) a.emplace_back("data-" + c.data_kind, label);
    const std::string text = c.format ? c.format(value) : format_number(value);
    w.open("rect", a).element("title", {}, label + ": " + text).close();
    w.element("text", {{"x", svg_number(left + len + 6)}, {"y", svg_number(y + 14)}}, text);
  }
  w.close();
}

}  // namespace autoshard
