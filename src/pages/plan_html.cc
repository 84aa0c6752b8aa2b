// The picture of a plan (plan_html.h).
#include "pages/plan_html.h"

#include <algorithm>
#include <map>
#include <regex>

#include "autoshard/error.h"
#include "autoshard/tensor/array_split.h"
#include "pages/html_writer.h"
#include "pages/svg_chart.h"

namespace autoshard {
namespace {

using A = HtmlWriter::Attributes;
using json = nlohmann::json;

// Meshes larger than this are described, not drawn device by device.
constexpr int kDrawnDevices = 1024;
// Holders of one block drawn as stripes; more are one grey block.
constexpr size_t kStripes = 8;

// Scoped to the page's <div class="autoshard-plan"> (a notebook shows the
// fragment among its own cells: its styles must not leak).
const char* const kStyle = R"(
.autoshard-plan{font:14px/1.4 system-ui,-apple-system,"Segoe UI",sans-serif;color:#222;max-width:1320px}
.autoshard-plan h1{font-size:20px;margin:0 0 4px}
.autoshard-plan h2{font-size:16px;margin:28px 0 8px;border-bottom:1px solid #ddd}
.autoshard-plan h3{font-size:14px;margin:14px 0 6px;color:#444}
.autoshard-plan .note{color:#666;font-size:12px}
.autoshard-plan table{border-collapse:collapse;font-size:13px}
.autoshard-plan td,.autoshard-plan th{padding:2px 10px 2px 0;text-align:left;vertical-align:top}
.autoshard-plan th{color:#555;font-weight:600}
.autoshard-plan .weights{display:flex;flex-wrap:wrap;gap:10px 22px}
.autoshard-plan .weight{font-size:12px}
.autoshard-plan .weight .name{font-family:ui-monospace,monospace}
.autoshard-plan svg text{font:11px system-ui,sans-serif;fill:#333}
.autoshard-plan .chart .title{font-size:13px;font-weight:600}
.autoshard-plan .chart .ytick{text-anchor:end}
.autoshard-plan .chart .xtick,.autoshard-plan .chart .xlabel,.autoshard-plan .chart .ylabel{text-anchor:middle}
.autoshard-plan .chart .grid{stroke:#eee}
.autoshard-plan .chart .frame{fill:none;stroke:#bbb}
.autoshard-plan .mesh .device text{fill:#fff;font-weight:600;text-anchor:middle}
.autoshard-plan .weight .block text{fill:#fff;text-anchor:middle;font-size:10px}
.autoshard-plan .charts{display:flex;flex-wrap:wrap;gap:12px}
)";

// The mesh: axis names and sizes, in the mesh's order.
struct Mesh {
  std::vector<std::string> names;
  std::vector<int> sizes;
  int size = 1;
  int axis(const std::string& name) const {
    const auto it = std::find(names.begin(), names.end(), name);
    return it == names.end() ? -1 : int(it - names.begin());
  }
  // The axes of a layout entry: "model", or a tuple's "(data,model)".
  std::vector<int> members(const std::string& label) const {
    std::vector<int> out;
    if (label.empty()) return out;
    if (label.front() != '(') return axis(label) < 0 ? out : std::vector<int>{axis(label)};
    for (size_t b = 1, e; b < label.size(); b = e + 1) {
      e = label.find_first_of(",)", b);
      out.push_back(axis(label.substr(b, e - b)));
    }
    // An axis this mesh lacks: drawn whole.
    return std::find(out.begin(), out.end(), -1) == out.end() ? out : std::vector<int>{};
  }
  std::vector<int> coordinates(int device) const {
    std::vector<int> c(sizes.size());
    for (size_t a = sizes.size(); a-- > 0;) c[a] = device % sizes[a], device /= sizes[a];
    return c;
  }
};

Mesh mesh_of(const json& report) {
  Mesh m;
  // figures keep the axes' order (the report's "mesh" object is sorted by name).
  if (report.contains("figures") && report["figures"].contains("mesh_axes"))
    for (const json& a : report["figures"]["mesh_axes"])
      m.names.push_back(a.at(0).get<std::string>()), m.sizes.push_back(a.at(1).get<int>());
  else
    for (const auto& [name, size] : report.at("mesh").items())
      m.names.push_back(name), m.sizes.push_back(size.get<int>());
  for (int s : m.sizes) {
    AS_CHECK(s >= 1, "plan_html: a mesh axis of size ", s);
    m.size = m.size * s > (1 << 30) ? (1 << 30) : m.size * s;
  }
  return m;
}

std::string mesh_string(const Mesh& m) {
  std::string s;
  for (size_t a = 0; a < m.names.size(); ++a)
    s += (a ? "," : "") + m.names[a] + "=" + std::to_string(m.sizes[a]);
  return s;
}

std::string coordinates_text(const Mesh& m, int d) {
  const std::vector<int> c = m.coordinates(d);
  std::string s;
  for (size_t a = 0; a < c.size(); ++a)
    s += (a ? " " : "") + m.names[a] + "=" + std::to_string(c[a]);
  return s;
}

// The mesh as a grid: the last axis across, the others down.
void write_mesh(HtmlWriter& w, const Mesh& m) {
  w.element("h2", {}, "Mesh " + mesh_string(m) + " (" + std::to_string(m.size) + " devices)");
  if (m.size > kDrawnDevices) {
    w.element("p", {{"class", "note"}},
              "Too many devices to draw one by one; weights below show their blocks by mesh "
              "coordinate.");
    return;
  }
  const int cols = m.sizes.back(), rows = m.size / cols;
  const double cell = cols > 16 ? 28 : 44, gap = 4, left = m.names.size() > 1 ? 110 : 4;
  const double width = left + cols * (cell + gap), height = 18 + rows * (cell + gap);
  w.open("svg", {{"class", "mesh"},
                 {"width", svg_number(width)},
                 {"height", svg_number(height)},
                 {"viewBox", "0 0 " + svg_number(width) + " " + svg_number(height)}});
  w.element("text", {{"x", svg_number(left)}, {"y", "12"}},
            m.names.back() + " \xe2\x86\x92 (" + std::to_string(cols) + ")");
  for (int r = 0; r < rows; ++r) {
    const double y = 18 + r * (cell + gap);
    if (m.names.size() > 1) {
      // The row's coordinates on the axes before the last.
      std::string label;
      const std::vector<int> c = m.coordinates(r * cols);
      for (size_t a = 0; a + 1 < c.size(); ++a)
        label += (a ? " " : "") + m.names[a] + "=" + std::to_string(c[a]);
      w.element("text", {{"x", "4"}, {"y", svg_number(y + cell / 2 + 4)}}, label);
    }
    for (int c = 0; c < cols; ++c) {
      const int d = r * cols + c;
      const double x = left + c * (cell + gap);
      w.open("g", {{"class", "device"}, {"data-device", std::to_string(d)}});
      w.open("rect", {{"x", svg_number(x)},
                      {"y", svg_number(y)},
                      {"width", svg_number(cell)},
                      {"height", svg_number(cell)},
                      {"rx", "4"},
                      {"fill", chart_colour(d)}});
      w.element("title", {}, "device " + std::to_string(d) + ": " + coordinates_text(m, d));
      w.close();
      w.element("text", {{"x", svg_number(x + cell / 2)}, {"y", svg_number(y + cell / 2 + 4)}},
                std::to_string(d));
      w.close();
    }
  }
  w.close();
}

struct WeightView {
  std::string name;  // the path, or its pattern for a repeated block's weights
  int count = 1;
  Shape shape;
  std::vector<std::string> layout;  // per dimension: mesh axis, or "" (whole)
  double bytes = 0;                 // of the largest block
};

std::string layout_text(const std::vector<std::string>& layout) {
  std::string s = "[";
  for (size_t k = 0; k < layout.size(); ++k)
    s += (k ? ", " : "") + (layout[k].empty() ? std::string("-") : layout[k]);
  return s + "]";
}

std::string shape_text(const Shape& shape) {
  std::string s = "[";
  for (size_t k = 0; k < shape.size(); ++k) s += (k ? ", " : "") + std::to_string(shape[k]);
  return s + "]";
}

// A dimension split over some mesh axes (none, one, or a tuple's members:
// nested array_split, as Sharding lays it out).
struct Split {
  std::vector<int> axes;
  const Mesh* mesh;
  int parts() const {
    int p = 1;
    for (int a : axes) p *= mesh->sizes[size_t(a)];
    return p;
  }
  // Piece k's {offset, size} of n elements (k: the members' coordinates as
  // one number, the first most significant).
  std::pair<int64_t, int64_t> piece(int64_t n, int k) const {
    int64_t begin = 0;
    for (size_t i = 0; i < axes.size(); ++i) {
      int inner = 1;
      for (size_t j = i + 1; j < axes.size(); ++j) inner *= mesh->sizes[size_t(axes[j])];
      const int size = mesh->sizes[size_t(axes[i])], c = k / inner % size;
      begin += split_offset(n, size, c);
      n = split_size(n, size, c);
    }
    return {begin, n};
  }
  int coordinate(const std::vector<int>& c) const {
    int k = 0;
    for (int a : axes) k = k * mesh->sizes[size_t(a)] + c[size_t(a)];
    return k;
  }
};

// The devices holding block (i, j) when rows split as `rs` and columns as
// `cs`: every device with those coordinates.
std::vector<std::vector<std::vector<int>>> holders(const Mesh& m, const Split& rs,
                                                   const Split& cs) {
  std::vector<std::vector<std::vector<int>>> h(size_t(rs.parts()),
                                               std::vector<std::vector<int>>(size_t(cs.parts())));
  if (m.size > kDrawnDevices) return h;
  for (int d = 0; d < m.size; ++d) {
    const std::vector<int> c = m.coordinates(d);
    h[size_t(rs.coordinate(c))][size_t(cs.coordinate(c))].push_back(d);
  }
  return h;
}

std::string device_list(const std::vector<int>& devices) {
  std::string s;
  for (size_t k = 0; k < devices.size(); ++k) {
    if (k) s += ' ';  // appended piece by piece: GCC 12 warns falsely (-Wrestrict) on "x" + temp
    s += std::to_string(devices[k]);
  }
  return s;
}

// One block: stripes of its holders' colours, its size and holders as data.
void write_block(HtmlWriter& w, const Mesh& m, double x, double y, double bw, double bh,
                 int64_t rows, int64_t cols, const std::string& where,
                 const std::vector<int>& devices) {
  w.open("g", {{"class", "block"},
               {"data-block", where},
               {"data-rows", std::to_string(rows)},
               {"data-cols", std::to_string(cols)},
               {"data-devices", device_list(devices)}});
  const bool striped = !devices.empty() && devices.size() <= kStripes;
  const size_t stripes = striped ? devices.size() : 1;
  for (size_t k = 0; k < stripes; ++k)
    w.element("rect", {{"x", svg_number(x + bw * double(k) / double(stripes))},
                       {"y", svg_number(y)},
                       {"width", svg_number(bw / double(stripes))},
                       {"height", svg_number(bh)},
                       {"fill", striped ? chart_colour(devices[k]) : "#8a8f98"}});
  std::string title = "block " + where + ": " + std::to_string(rows) + " x " +
                      std::to_string(cols) + (devices.empty() ? "" : ", on device(s) ") +
                      device_list(devices);
  if (devices.empty() && m.size > kDrawnDevices) title += " (one block per mesh coordinate)";
  w.element("rect", {{"x", svg_number(x)},
                     {"y", svg_number(y)},
                     {"width", svg_number(bw)},
                     {"height", svg_number(bh)},
                     {"fill", "none"},
                     {"stroke", "#fff"},
                     {"stroke-width", "1"},
                     {"data-height", svg_number(bh)},
                     {"data-width", svg_number(bw)}});
  w.element("title", {}, title);
  if (bh >= 13 && bw >= 8.0 * double(device_list(devices).size()) && !devices.empty() &&
      devices.size() < size_t(m.size))
    w.element("text", {{"x", svg_number(x + bw / 2)}, {"y", svg_number(y + bh / 2 + 4)}},
              device_list(devices));
  w.close();
}

// A weight as rectangles: rows along its first split dimension (or its
// first), columns along a second one; each block's height and width are its
// array_split part's share of the dimension.
void write_weight(HtmlWriter& w, const Mesh& m, const WeightView& v) {
  std::vector<int> split;
  for (size_t k = 0; k < v.layout.size(); ++k)
    if (!v.layout[k].empty()) split.push_back(int(k));
  const int rank = int(v.shape.size());
  int rd = -1, cd = -1;  // the dimensions drawn down and across
  if (rank == 1) {
    cd = 0;
  } else if (rank >= 2) {
    std::vector<int> dims = split;
    for (int k = 0; k < rank && dims.size() < 2; ++k)
      if (std::find(dims.begin(), dims.end(), k) == dims.end()) dims.push_back(k);
    dims.resize(2);
    std::sort(dims.begin(), dims.end());
    rd = dims[0], cd = dims[1];
  }
  const int64_t nr = rd < 0 ? 1 : v.shape[rd], nc = cd < 0 ? 1 : v.shape[cd];
  const Split rs{rd < 0 ? std::vector<int>{} : m.members(v.layout[rd]), &m};
  const Split cs{cd < 0 ? std::vector<int>{} : m.members(v.layout[cd]), &m};
  const int pr = rs.parts(), pc = cs.parts();
  // The whole weight's rectangle keeps its aspect within bounds.
  const double full = 220;
  double width = full, height = 16;
  if (rd >= 0 && nr > 0 && nc > 0) {
    const double aspect = double(nr) / double(nc);
    width = aspect > 1 ? std::max(40.0, full / aspect) : full;
    height = std::clamp(width * aspect, 16.0, 180.0);
  }
  w.open("div", {{"class", "weight"},
                 {"data-weight", v.name},
                 {"data-count", std::to_string(v.count)},
                 {"data-shape", shape_text(v.shape)},
                 {"data-layout", layout_text(v.layout)}});
  w.open("div").element("span", {{"class", "name"}}, v.name);
  if (v.count > 1) w.element("span", {{"class", "count"}}, " \xc3\x97" + std::to_string(v.count));
  w.close();
  std::string caption = shape_text(v.shape) + " " + layout_text(v.layout) + ", " +
                        format_mib(v.bytes) + " per device";
  if (split.size() > 2) caption += " (further splits not drawn)";
  w.element("div", {{"class", "note"}}, caption);
  w.open("svg", {{"width", svg_number(width + 2)},
                 {"height", svg_number(height + 2)},
                 {"viewBox", "-1 -1 " + svg_number(width + 2) + " " + svg_number(height + 2)}});
  const auto held = holders(m, rs, cs);
  for (int i = 0; i < pr; ++i)
    for (int j = 0; j < pc; ++j) {
      const auto [row0, rows] = rs.piece(nr, i);
      const auto [col0, cols] = cs.piece(nc, j);
      const double y = nr > 0 ? height * double(row0) / double(nr) : 0;
      const double x = nc > 0 ? width * double(col0) / double(nc) : 0;
      const double bh = nr > 0 ? height * double(rows) / double(nr) : height;
      const double bw = nc > 0 ? width * double(cols) / double(nc) : width;
      write_block(w, m, x, y, bw, bh, rows, cols, std::to_string(i) + "," + std::to_string(j),
                  held[i][j]);
    }
  w.close().close();
}

// The weights in the model's order (figures' list, then any others).
std::vector<std::string> weight_order(const json& report) {
  std::vector<std::string> order;
  const json& params = report.at("parameters");
  if (report.contains("figures") && report["figures"].contains("weights"))
    for (const json& p : report["figures"]["weights"])
      if (params.contains(p.get<std::string>())) order.push_back(p.get<std::string>());
  for (const auto& [path, v] : params.items())
    if (std::find(order.begin(), order.end(), path) == order.end()) order.push_back(path);
  return order;
}

WeightView view_of(const std::string& path, const json& p) {
  WeightView v;
  v.name = path;
  for (const json& d : p.at("shape")) v.shape.push_back(d.get<int64_t>());
  for (const json& a : p.at("layout")) {
    if (!a.is_array()) {
      v.layout.push_back(a.is_null() ? "" : a.get<std::string>());
      continue;
    }
    std::string tuple;  // "(data,model)"
    for (const json& m : a) tuple += (tuple.empty() ? "(" : ",") + m.get<std::string>();
    v.layout.push_back(tuple + ")");
  }
  v.bytes = p.value("bytes_per_device", 0.0);
  return v;
}

// Layers in order of first appearance, each with its weights; a repeated
// block's weights that share shape and layout are one view with a count.
void write_weights(HtmlWriter& w, const Mesh& m, const json& report) {
  std::vector<std::string> layers;
  std::map<std::string, std::vector<WeightView>> views;
  for (const std::string& path : weight_order(report)) {
    const WeightPattern wp = weight_pattern(path);
    WeightView v = view_of(path, report["parameters"][path]);
    if (!views.count(wp.layer)) layers.push_back(wp.layer);
    auto& list = views[wp.layer];
    auto same = std::find_if(list.begin(), list.end(), [&](const WeightView& o) {
      return o.name == wp.pattern && o.shape == v.shape && o.layout == v.layout;
    });
    if (wp.pattern != path && same != list.end()) {
      ++same->count;
      continue;
    }
    // The first of a pattern is named by it; one that differs keeps its path.
    const bool taken = std::any_of(list.begin(), list.end(),
                                   [&](const WeightView& o) { return o.name == wp.pattern; });
    if (!taken) v.name = wp.pattern;
    list.push_back(std::move(v));
  }
  w.element("h2", {}, "Weights: which device holds which block");
  w.element("p", {{"class", "note"}},
            "Each rectangle is a weight (rows: its first split dimension, or its first; columns: "
            "a second), cut into the blocks of its layout. A block's size is its share of the "
            "dimension (numpy's array_split: the first parts take the remainder), its colours "
            "the devices holding it (as in the mesh above). A repeated block's weights of the "
            "same shape and layout are drawn once, with their count.");
  for (const std::string& layer : layers) {
    int count = 0;
    for (const WeightView& v : views[layer]) count = std::max(count, v.count);
    w.element("h3", {}, layer + (count > 1 ? " (\xc3\x97" + std::to_string(count) + ")" : ""));
    w.open("div", {{"class", "weights"}});
    for (const WeightView& v : views[layer]) write_weight(w, m, v);
    w.close();
  }
}

std::vector<std::pair<std::string, double>> sorted_bars(const json& object, size_t keep) {
  std::vector<std::pair<std::string, double>> bars;
  for (const auto& [k, v] : object.items()) bars.emplace_back(k, v.get<double>());
  std::stable_sort(bars.begin(), bars.end(),
                   [](const auto& a, const auto& b) { return a.second > b.second; });
  if (bars.size() > keep) {
    double rest = 0;
    for (size_t k = keep - 1; k < bars.size(); ++k) rest += bars[k].second;
    bars.resize(keep - 1);
    bars.emplace_back("(other kinds)", rest);
  }
  return bars;
}

void write_step(HtmlWriter& w, const json& report) {
  w.element("h2", {}, "The predicted step");
  if (!report.contains("figures")) {
    w.element("p", {{"class", "note"}}, "Not computed for this page.");
    return;
  }
  const json& f = report["figures"];
  w.element("p", {},
            "On cluster '" + f.value("cluster", std::string("?")) +
                "': " + format_seconds(f.value("step_s", 0.0)) + " per step, compute " +
                format_seconds(f.value("compute_s", 0.0)) + ", communication " +
                format_seconds(f.value("communication_s", 0.0)) + " (not overlapped), device 0.");
  json axes = f.value("by_axis", json::object());
  axes["(compute)"] = f.value("compute_s", 0.0);
  w.open("div", {{"class", "charts"}});
  write_bar_chart(w, {.title = "By op kind",
                      .bars = sorted_bars(f.value("by_op", json::object()), 16),
                      .format = format_seconds,
                      .data_kind = "op"});
  write_bar_chart(w, {.title = "By mesh axis (communication) and compute",
                      .bars = sorted_bars(axes, 16),
                      .format = format_seconds,
                      .colour = "#f28e2b",
                      .data_kind = "axis"});
  w.close();
}

void write_memory(HtmlWriter& w, const json& report) {
  if (!report.contains("figures")) return;
  const json& mem = report["figures"].at("memory");
  LineChart chart;
  chart.title = "Memory per device over the step";
  chart.x_label =
      "position in the device's program (" + std::to_string(mem.value("positions", 0)) + " ops)";
  chart.y_label = "bytes held";
  chart.y_format = format_mib;
  chart.y_from_zero = true;
  int k = 0;
  double last = 0;
  for (const json& d : mem.at("devices")) {
    ChartSeries s;
    s.name = "device " + std::to_string(d.at("device").get<int>());
    s.colour = chart_colour(d.at("device").get<int>());
    for (size_t i = 0; i < d.at("at").size(); ++i)
      s.points.emplace_back(d["at"][i].get<double>(), d["bytes"][i].get<double>());
    if (!s.points.empty()) last = std::max(last, s.points.back().first);
    chart.series.push_back(std::move(s));
    ++k;
  }
  const double planned = mem.value("planned_bytes", 0.0);
  if (k > 0 && planned > 0)
    chart.series.push_back({.name = "planned buffers",
                            .colour = "#888",
                            .points = {{0, planned}, {last, planned}},
                            .dashed = true});
  write_line_chart(w, chart);
  w.element("p", {{"class", "note"}},
            "Weights, optimizer state and inputs for the whole step, plus each value from the op "
            "that computes it to the last op that reads it. The dashed line is the total with "
            "the executor's buffer plan (buffers are reused, not freed and reallocated).");
}

// AutoShard's reasons: the outcome and the meshes it tried, then per weight
// the layout chosen against the cheapest one rejected.
void write_alternatives(HtmlWriter& w, const json& report) {
  w.element("h2", {}, "What AutoShard rejected, and what it would cost");
  if (!report.contains("reasons")) {
    w.element("p", {{"class", "note"}}, "This plan was not chosen by AutoShard (--plan auto).");
    return;
  }
  static const std::regex kLine(
      R"(^(\S+) (\[[^\]]*\]); next best (\[[^\]]*\]): (\S+ ms), (\S+ MiB) per device)"
      R"((?: \(decided once for (\d+) layers\))?$)");
  std::vector<std::string> general;
  std::vector<std::vector<std::string>> rows;
  std::map<std::string, bool> seen;
  for (const json& line : report["reasons"]) {
    const std::string s = line.get<std::string>();
    std::smatch mt;
    if (!std::regex_match(s, mt, kLine)) {
      if (s.find(' ') != std::string::npos && s.find('[') == std::string::npos)
        general.push_back(s);
      continue;
    }
    const std::string pattern = weight_pattern(mt[1]).pattern;
    const std::string key = pattern + mt[2].str() + mt[3].str() + mt[4].str();
    if (seen[key]) continue;
    seen[key] = true;
    rows.push_back({pattern, mt[2], mt[3], mt[4], mt[5], mt[6].matched ? mt[6].str() : "1"});
  }
  w.open("ul");
  for (const std::string& s : general) w.element("li", {}, s);
  w.close();
  if (rows.empty()) return;
  w.open("table", {{"class", "alternatives"}}).open("thead").open("tr");
  for (const char* h :
       {"weight", "chosen", "next best (rejected)", "step time", "memory per device", "layers"})
    w.element("th", {}, h);
  w.close().close().open("tbody");
  for (const auto& r : rows) {
    w.open("tr", {{"data-alternative", r[0]}});
    for (size_t k = 0; k < r.size(); ++k) w.element("td", {}, r[k]);
    w.close();
  }
  w.close().close();
}

void write_summary(HtmlWriter& w, const json& report) {
  const json& b = report.at("bytes_per_device");
  w.open("table").open("tbody");
  auto row = [&w](const std::string& k, const std::string& v) {
    w.open("tr").element("th", {}, k).element("td", {}, v).close();
  };
  row("memory per device (largest)",
      format_mib(b.value("total", 0.0)) + " (weights " + format_mib(b.value("weights", 0.0)) +
          ", optimizer state " + format_mib(b.value("optimizer_state", 0.0)) + ", activations " +
          format_mib(b.value("activations", 0.0)) + ")");
  if (report.contains("predicted")) {
    const json& p = report["predicted"];
    row("predicted step", format_seconds(p.value("step_s", 0.0)));
    if (p.value("tokens_per_s", 0.0) > 0) row("tokens/s", format_number(p["tokens_per_s"]));
    row("predicted peak per device", format_mib(p.value("peak_bytes_per_device", 0.0)));
  }
  w.close().close();
}

// The weights' table: every weight by its own path (the pictures group them).
void write_table(HtmlWriter& w, const json& report) {
  w.open("details").element("summary", {}, "Every weight");
  w.open("table").open("thead").open("tr");
  for (const char* h : {"weight", "shape", "layout", "bytes/device"}) w.element("th", {}, h);
  w.close().close().open("tbody");
  for (const std::string& path : weight_order(report)) {
    const WeightView v = view_of(path, report["parameters"][path]);
    w.open("tr")
        .element("td", {}, path)
        .element("td", {}, shape_text(v.shape))
        .element("td", {}, layout_text(v.layout))
        .element("td", {}, format_mib(v.bytes))
        .close();
  }
  w.close().close().close();
}

}  // namespace

WeightPattern weight_pattern(const std::string& path) {
  size_t begin = 0;
  while (begin <= path.size()) {
    const size_t end = std::min(path.find('.', begin), path.size());
    const std::string part = path.substr(begin, end - begin);
    if (!part.empty() && std::all_of(part.begin(), part.end(), ::isdigit))
      return {path.substr(0, begin) + "*" + path.substr(end), path.substr(0, begin) + "*"};
    begin = end + 1;
  }
  return {path, path.substr(0, path.find('.'))};
}

std::string plan_html_fragment(const json& report, const std::string& title) {
  AS_CHECK(report.contains("mesh") && report.contains("parameters") &&
               report.contains("bytes_per_device"),
           "plan_html: the report lacks mesh, parameters or bytes_per_device (plan_report's)");
  const Mesh m = mesh_of(report);
  HtmlWriter w;
  w.open("div", {{"class", "autoshard-plan"}});
  w.open("style").raw(kStyle).close();
  w.element("h1", {}, title);
  write_summary(w, report);
  write_mesh(w, m);
  write_weights(w, m, report);
  write_table(w, report);
  write_step(w, report);
  write_memory(w, report);
  write_alternatives(w, report);
  w.close();
  return w.str();
}

std::string plan_html(const json& report, const std::string& title) {
  HtmlWriter w;
  w.raw("<!DOCTYPE html>\n");
  w.open("html", {{"lang", "en"}}).open("head");
  w.raw("<meta charset=\"utf-8\">\n");
  w.element("title", {}, title);
  w.open("style").raw("body{margin:24px;background:#fff}").close();
  w.close().open("body").raw(plan_html_fragment(report, title));
  w.element("p", {{"style", "color:#666;font-size:12px"}}, "Written by autoshard plan --html.");
  w.close().close();
  return w.str();
}

}  // namespace autoshard
