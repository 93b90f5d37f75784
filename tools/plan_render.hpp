// Pictures of scheduler plans for `geniex plan --svg/--html`: one row per layer, one box per
// op coloured by backend, copies between backends as marked arrows, a legend with totals.
// Self-contained (no scripts, no fonts or styles from the network) and deterministic: the same
// plans give the same bytes.
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "geniex/geniex.hpp"

namespace geniex::cli {

struct TitledPlan {
  std::string title;  // "decode", "prefill"
  PlanSummary plan;
};

// heading: first line of the picture (model, device).
std::string render_plan_svg(const std::string& heading, const std::vector<TitledPlan>& plans);
// The SVG inside an HTML page, with a table of totals per plan and backend.
std::string render_plan_html(const std::string& heading, const std::vector<TitledPlan>& plans);

// Short label for an op box ("mm", "attn").
std::string op_label(const std::string& op);
// &, <, >, " and ' as XML entities.
std::string xml_escape(const std::string& s);

}  // namespace geniex::cli
