// The picture of a plan: one self-contained HTML page (inline CSS and SVG,
// no script, nothing fetched) that `autoshard plan --html` writes and
// autoshard.Plan shows in a notebook (_repr_html_). It draws
//   - the mesh as a grid of devices (data-device="k" on each),
//   - each weight's blocks as rectangles sized by array_split's parts (an
//     uneven split shows as unequal blocks) and coloured by the devices that
//     hold them; weights grouped by layer, a repeated block's weights drawn
//     once with their count (data-weight="h.*.mlp.c_fc.kernel", data-count),
//   - the predicted step by op kind and by mesh axis (bars), and memory per
//     device over the step (lines),
//   - the alternatives AutoShard weighed and rejected, with their cost.
// Every name is escaped (html_writer.h).
#pragma once

#include <nlohmann/json.hpp>
#include <string>

namespace autoshard {

// `report`: plan_report's object (autoshard/pages/plan_report.h) with the
// callers' "reasons" and "predicted" where they have them, and "figures"
// (plan_figures.h; without it the charts say they were not computed).
// `title` heads the page.
std::string plan_html(const nlohmann::json& report, const std::string& title);
// The page's <div> alone, its style scoped to it (a notebook's cell).
std::string plan_html_fragment(const nlohmann::json& report, const std::string& title);

// The weights' display pattern: the first all-digit component of a dotted
// path replaced by "*" ("h.3.mlp.c_fc.kernel" -> "h.*.mlp.c_fc.kernel"),
// and the layer it belongs to ("h.*"; a path without a number: its first
// component).
struct WeightPattern {
  std::string pattern, layer;
};
WeightPattern weight_pattern(const std::string& path);

}  // namespace autoshard
