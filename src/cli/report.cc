// `autoshard report RUN.jsonl [RUN2.jsonl ...] --html FILE.html [--png
// FILE.png]`: the training curves of one or several runs (train --log's
// JSON lines) on one self-contained page: loss (training solid, validation
// dashed) , learning rate and throughput against step, the runs overlaid in
// one colour each; --png renders that page with a headless Chromium.
#include <filesystem>
#include <map>
#include <set>

#include "autoshard/error.h"
#include "cli/commands.h"
#include "cli/output_file.h"
#include "cli/training_log.h"
#include "pages/headless_chromium.h"
#include "pages/html_writer.h"
#include "pages/svg_chart.h"

namespace autoshard::cli {
namespace {

struct ReportOptions {
  std::vector<std::string> logs;
  std::string html, png;
  bool overwrite = false;
};

// Runs are named by their file's stem, or by their path where stems repeat.
std::vector<std::string> run_names(const std::vector<TrainingLog>& runs) {
  std::map<std::string, int> stems;
  for (const TrainingLog& r : runs) ++stems[std::filesystem::path(r.path).stem().string()];
  std::vector<std::string> names;
  for (const TrainingLog& r : runs) {
    const std::string stem = std::filesystem::path(r.path).stem().string();
    names.push_back(stems[stem] > 1 ? r.path : stem);
  }
  return names;
}

// One chart of `fields` (the first found per run, or each of them with
// `every`) against step, a series per run and field.
LineChart curves(const std::vector<TrainingLog>& runs, const std::vector<std::string>& names,
                 const std::string& title, const std::vector<std::string>& fields, bool every) {
  LineChart c;
  c.title = title;
  c.x_label = "step";
  c.y_label = fields[0];
  for (size_t r = 0; r < runs.size(); ++r)
    for (size_t k = 0; k < fields.size(); ++k) {
      const auto it = runs[r].series.find(fields[k]);
      if (it == runs[r].series.end()) continue;
      const std::string suffix = every ? " " + fields[k] : "";
      c.series.push_back({.name = names[r] + suffix,
                          .colour = chart_colour(int(r)),
                          .points = it->second,
                          .dashed = every && k > 0});
      if (!every) {
        c.y_label = fields[k];
        break;
      }
    }
  return c;
}

std::string last_of(const TrainingLog& r, const std::string& field) {
  const auto it = r.series.find(field);
  return it == r.series.end() || it->second.empty() ? "-" : format_number(it->second.back().second);
}

std::string report_page(const std::vector<TrainingLog>& runs) {
  const std::vector<std::string> names = run_names(runs);
  std::string list;
  for (const std::string& n : names) list += (list.empty() ? "" : ", ") + n;
  HtmlWriter w;
  w.raw("<!DOCTYPE html>\n");
  w.open("html", {{"lang", "en"}}).open("head");
  w.raw("<meta charset=\"utf-8\">\n");
  w.element("title", {}, "Training curves: " + list);
  w.open("style")
      .raw(
          "body{font:14px/1.4 system-ui,sans-serif;color:#222;margin:24px;max-width:1320px}"
          "h1{font-size:20px}table{border-collapse:collapse;font-size:13px;margin-bottom:16px}"
          "td,th{padding:2px 12px 2px 0;text-align:left}th{color:#555}"
          ".charts{display:flex;flex-wrap:wrap;gap:12px}"
          ".chart text{font:11px system-ui,sans-serif;fill:#333}"
          ".chart .title{font-size:13px;font-weight:600}.chart .ytick{text-anchor:end}"
          ".chart .xtick,.chart .xlabel,.chart .ylabel{text-anchor:middle}"
          ".chart .grid{stroke:#eee}.chart .frame{fill:none;stroke:#bbb}"
          ".swatch{display:inline-block;width:12px;height:12px;border-radius:2px;"
          "margin-right:6px;vertical-align:-1px}")
      .close();
  w.close().open("body");
  w.element("h1", {}, "Training curves: " + list);
  w.open("table").open("thead").open("tr");
  for (const char* h : {"run", "file", "steps", "last loss", "last val_loss", "last lr"})
    w.element("th", {}, h);
  w.close().close().open("tbody");
  for (size_t r = 0; r < runs.size(); ++r) {
    w.open("tr", {{"data-run", names[r]}}).open("td");
    w.element("span", {{"class", "swatch"}, {"style", "background:" + chart_colour(int(r))}});
    w.text(names[r]).close();
    w.element("td", {}, runs[r].path)
        .element("td", {}, std::to_string(runs[r].steps))
        .element("td", {}, last_of(runs[r], "loss"))
        .element("td", {}, last_of(runs[r], "val_loss"))
        .element("td", {}, last_of(runs[r], "lr"))
        .close();
  }
  w.close().close();
  w.open("div", {{"class", "charts"}});
  write_line_chart(w, curves(runs, names, "Loss (validation dashed)", {"loss", "val_loss"}, true));
  write_line_chart(w, curves(runs, names, "Learning rate", {"lr"}, false));
  write_line_chart(
      w, curves(runs, names, "Throughput", {"tokens_per_second", "examples_per_second"}, false));
  write_line_chart(w, curves(runs, names, "Step time", {"step_ms"}, false));
  w.close();
  w.element("p", {{"style", "color:#666;font-size:12px"}}, "Written by autoshard report.");
  w.close().close();
  return w.str();
}

void run_report(const ReportOptions& o) {
  AS_CHECK(!o.html.empty() || !o.png.empty(),
           "report: give --html FILE.html (the page) and/or --png FILE.png (a picture of it)");
  if (!o.html.empty()) check_output_path(o.html, "--html", o.overwrite);
  if (!o.png.empty()) {
    check_output_path(o.png, "--png", o.overwrite);
    require_chromium("--png");
  }
  std::vector<TrainingLog> runs;
  for (const std::string& path : o.logs) runs.push_back(read_training_log(path));
  const std::string page = report_page(runs);
  if (!o.html.empty()) write_output_file(o.html, "--html", page, o.overwrite);
  if (o.png.empty()) return;
  // Chromium reads a file: the page itself, or a temporary one beside the PNG.
  std::string source = o.html;
  if (source.empty()) {
    source = o.png + ".report.html";
    write_output_file(source, "--png", page, true);
  }
  try {
    if (o.overwrite) std::filesystem::remove(o.png);
    render_png(source, o.png, 1330, 770 + 24 * int(runs.size()), "--png");
  } catch (...) {
    if (o.html.empty()) std::filesystem::remove(source);
    throw;
  }
  if (o.html.empty()) std::filesystem::remove(source);
}

}  // namespace

void add_report_command(CLI::App& app) {
  auto o = std::make_shared<ReportOptions>();
  CLI::App* cmd = app.add_subcommand(
      "report", "draw training curves (loss, learning rate, throughput) of train --log files");
  cmd->add_option("logs", o->logs, "JSON-lines logs of train --log, one per run (overlaid)")
      ->required();
  cmd->add_option("--html", o->html, "write the curves as one self-contained HTML page");
  cmd->add_option("--png", o->png, "also render the page to a PNG (needs chromium installed)");
  add_overwrite(cmd, o->overwrite);
  cmd->callback([o] { run_report(*o); });
}

}  // namespace autoshard::cli
