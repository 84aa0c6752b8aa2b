// Charts drawn as inline SVG by HtmlWriter for autoshard's pages: a line
// chart of several series against one x axis (training curves, memory over
// a step) and a horizontal bar chart (a step's time by op kind or by mesh
// axis). Axes get round tick values; every series is one <polyline> whose
// data-series attribute names it and whose points are one per datum, so a
// test (or a person reading the source) can count them.
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "pages/html_writer.h"

namespace autoshard {

// Colour k of a palette of well separated colours (the first ten are a
// common qualitative palette; further ones step around the hue circle).
std::string chart_colour(int k);

struct ChartSeries {
  std::string name;
  std::string colour;
  std::vector<std::pair<double, double>> points;  // (x, y), x ascending
  bool dashed = false;
};

struct LineChart {
  std::string title, x_label, y_label;
  std::vector<ChartSeries> series;
  // Formats a y tick ("1.2 GiB"); empty: the number itself.
  std::string (*y_format)(double) = nullptr;
  bool y_from_zero = false;  // the y axis starts at 0 (bytes), else at the data's least
};

// An <svg> of `chart` (with its legend); a chart without points says so.
void write_line_chart(HtmlWriter& w, const LineChart& chart);

struct BarChart {
  std::string title;
  std::vector<std::pair<std::string, double>> bars;  // label, value >= 0 (drawn in this order)
  std::string (*format)(double) = nullptr;           // a bar's value as text
  std::string colour = "#4e79a7";
  std::string data_kind;  // data-<kind>="label" on each bar ("op", "axis")
};

void write_bar_chart(HtmlWriter& w, const BarChart& chart);

// "12.3 ms", "450 us", "1.2 s".
std::string format_seconds(double s);
// "12.0 MiB", "1.50 GiB".
std::string format_mib(double bytes);
// Three significant digits ("0.000123", "1.23e+06").
std::string format_number(double v);

}  // namespace autoshard
