// SVG and HTML pictures of scheduler plans (see plan_render.hpp).
#include "plan_render.hpp"

#include <algorithm>
#include <cstdio>
#include <map>

namespace geniex::cli {
namespace {

constexpr int kMargin = 16;
constexpr int kLabelW = 74;
constexpr int kBoxW = 30;
constexpr int kBoxH = 22;
constexpr int kGap = 3;
constexpr int kCopyW = 18;
constexpr int kRowH = kBoxH + 6;
constexpr int kTotalsW = 96;

const char* const kPalette[] = {"#4e79a7", "#f28e2b", "#59a14f", "#b07aa1", "#76b7b2", "#edc948", "#9c755f"};
constexpr const char* kCopyColor = "#d62728";

std::string num(double v, int decimals = 1) {
  char buf[64];
  std::snprintf(buf, sizeof(buf), "%.*f", decimals, v);
  return buf;
}

std::string bytes_text(int64_t b) {
  const double v = static_cast<double>(b);
  if (v >= 1024.0 * 1024.0 * 1024.0) return num(v / (1024.0 * 1024.0 * 1024.0), 2) + " GiB";
  if (v >= 1024.0 * 1024.0) return num(v / (1024.0 * 1024.0), 2) + " MiB";
  if (v >= 1024.0) return num(v / 1024.0, 1) + " KiB";
  return std::to_string(b) + " B";
}

// Backends in order of first appearance (activation list first, then rows), cpu first.
std::vector<std::string> backend_order(const std::vector<TitledPlan>& plans) {
  std::vector<std::string> order;
  auto add = [&](const std::string& b) {
    if (b.empty() || b == "-") return;
    if (std::find(order.begin(), order.end(), b) == order.end()) order.push_back(b);
  };
  add("cpu");
  for (const TitledPlan& p : plans) {
    for (const auto& [b, bytes] : p.plan.activation_bytes) add(b);
    for (const PlanRow& r : p.plan.rows) add(r.backend);
  }
  // cpu only when some plan uses it
  bool cpu_used = false;
  for (const TitledPlan& p : plans) {
    for (const auto& [b, bytes] : p.plan.activation_bytes) cpu_used = cpu_used || b == "cpu";
    for (const PlanRow& r : p.plan.rows) cpu_used = cpu_used || r.backend == "cpu";
  }
  if (!cpu_used) order.erase(order.begin());
  return order;
}

struct Group {
  std::string label;
  std::vector<const PlanRow*> rows;
  double estimated_us = 0;
};

// Consecutive rows of one layer form a group; rows outside any layer are "input" before the
// first layer and "output" after.
std::vector<Group> group_rows(const PlanSummary& plan) {
  std::vector<Group> groups;
  bool seen_layer = false;
  int32_t current = -2;
  for (const PlanRow& r : plan.rows) {
    if (groups.empty() || r.layer != current) {
      Group g;
      if (r.layer >= 0) {
        g.label = "layer " + std::to_string(r.layer);
      } else {
        g.label = seen_layer ? "output" : "input";
      }
      groups.push_back(std::move(g));
      current = r.layer;
    }
    seen_layer = seen_layer || r.layer >= 0;
    groups.back().rows.push_back(&r);
    groups.back().estimated_us += r.estimated_us;
  }
  return groups;
}

int row_width(const Group& g) {
  int w = 0;
  for (const PlanRow* r : g.rows) w += (r->op == "copy" ? kCopyW : kBoxW) + kGap;
  return w;
}

std::string tooltip(const PlanRow& r) {
  return xml_escape(r.name + " (" + r.op + ", " + r.type + ", " + r.shape + ")\n" + r.backend + ", est " +
                    num(r.estimated_us) + " us\n" + r.reason);
}

struct Totals {
  std::map<std::string, double> us;
  std::map<std::string, int> nodes;
};

Totals totals_of(const PlanSummary& plan) {
  Totals t;
  for (const auto& [b, us] : plan.estimated_us) t.us[b] += us;
  for (const PlanRow& r : plan.rows) {
    if (r.op != "copy" && r.op != "input") t.nodes[r.backend] += 1;
  }
  return t;
}

std::string plan_caption(const TitledPlan& p) {
  const Totals t = totals_of(p.plan);
  std::string s = p.title + ": " + std::to_string(p.plan.n_tokens) + " token" + (p.plan.n_tokens == 1 ? "" : "s");
  double sum = p.plan.estimated_copy_us;
  for (const auto& [b, us] : p.plan.estimated_us) {
    s += ", " + b + " " + num(us) + " us";
    sum += us;
  }
  s += ", copies " + std::to_string(p.plan.n_copies) + " (" + num(p.plan.estimated_copy_us) + " us)";
  s += ", estimated total " + num(sum) + " us";
  return s;
}

}  // namespace

std::string xml_escape(const std::string& s) {
  std::string out;
  out.reserve(s.size());
  for (const char c : s) {
    switch (c) {
      case '&': out += "&amp;"; break;
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '"': out += "&quot;"; break;
      case '\'': out += "&apos;"; break;
      default:
        // Control bytes are not allowed in XML 1.0 (except tab and newline).
        if (static_cast<unsigned char>(c) < 0x20 && c != '\n' && c != '\t') {
          out += ' ';
        } else {
          out += c;
        }
    }
  }
  return out;
}

std::string op_label(const std::string& op) {
  static const std::map<std::string, std::string> labels = {
      {"input", "in"},    {"get_rows", "rows"}, {"rms_norm", "norm"}, {"matmul", "mm"},
      {"add", "add"},     {"rope", "rope"},     {"attention", "attn"}, {"swiglu", "glu"},
      {"geglu", "glu"},   {"scale", "scl"},      {"copy", "copy"}};
  const auto it = labels.find(op);
  return it != labels.end() ? it->second : op.substr(0, 4);
}

std::string render_plan_svg(const std::string& heading, const std::vector<TitledPlan>& plans) {
  const std::vector<std::string> order = backend_order(plans);
  std::map<std::string, std::string> color;
  for (size_t i = 0; i < order.size(); ++i) color[order[i]] = kPalette[i % (sizeof(kPalette) / sizeof(kPalette[0]))];

  std::vector<std::vector<Group>> groups;
  int max_row = 200;
  for (const TitledPlan& p : plans) {
    groups.push_back(group_rows(p.plan));
    for (const Group& g : groups.back()) max_row = std::max(max_row, row_width(g));
  }
  const int width = kMargin * 2 + kLabelW + max_row + kTotalsW;

  std::string body;
  int y = kMargin;
  body += "<text x=\"" + std::to_string(kMargin) + "\" y=\"" + std::to_string(y + 12) +
          "\" class=\"h\">" + xml_escape(heading) + "</text>\n";
  y += 24;
  // Legend: one swatch per backend, then the copy arrow.
  int x = kMargin;
  body += "<g class=\"legend\">\n";
  for (const std::string& b : order) {
    body += "<rect x=\"" + std::to_string(x) + "\" y=\"" + std::to_string(y) + "\" width=\"14\" height=\"14\" fill=\"" +
            color[b] + "\"/><text x=\"" + std::to_string(x + 18) + "\" y=\"" + std::to_string(y + 11) + "\">" +
            xml_escape(b) + "</text>\n";
    x += 28 + static_cast<int>(b.size()) * 7 + 12;
  }
  body += "<line x1=\"" + std::to_string(x) + "\" y1=\"" + std::to_string(y + 7) + "\" x2=\"" + std::to_string(x + 16) +
          "\" y2=\"" + std::to_string(y + 7) + "\" class=\"copy\" marker-end=\"url(#arrow)\"/><text x=\"" +
          std::to_string(x + 22) + "\" y=\"" + std::to_string(y + 11) +
          "\">copy between backends</text>\n</g>\n";
  y += 26;

  for (size_t pi = 0; pi < plans.size(); ++pi) {
    const TitledPlan& p = plans[pi];
    body += "<g class=\"plan\" id=\"plan-" + xml_escape(p.title) + "\">\n";
    body += "<text x=\"" + std::to_string(kMargin) + "\" y=\"" + std::to_string(y + 12) + "\" class=\"t\">" +
            xml_escape(plan_caption(p)) + "</text>\n";
    y += 18;
    std::string act = "activation memory:";
    for (const auto& [b, bytes] : p.plan.activation_bytes) act += " " + b + " " + bytes_text(bytes);
    body += "<text x=\"" + std::to_string(kMargin) + "\" y=\"" + std::to_string(y + 12) + "\">" + xml_escape(act) +
            "</text>\n";
    y += 20;
    for (const Group& g : groups[pi]) {
      body += "<text x=\"" + std::to_string(kMargin) + "\" y=\"" + std::to_string(y + 15) + "\">" +
              xml_escape(g.label) + "</text>\n";
      x = kMargin + kLabelW;
      for (const PlanRow* r : g.rows) {
        if (r->op == "copy") {
          const int mid = y + kBoxH / 2;
          body += "<g class=\"node\" data-node=\"" + std::to_string(r->node) + "\"><title>" + tooltip(*r) +
                  "</title><line x1=\"" + std::to_string(x) + "\" y1=\"" + std::to_string(mid) + "\" x2=\"" +
                  std::to_string(x + kCopyW - 4) + "\" y2=\"" + std::to_string(mid) +
                  "\" class=\"copy\" marker-end=\"url(#arrow)\"/></g>\n";
          x += kCopyW + kGap;
          continue;
        }
        const std::string fill = color.count(r->backend) ? color[r->backend] : "#bab0ac";
        body += "<g class=\"node\" data-node=\"" + std::to_string(r->node) + "\"><title>" + tooltip(*r) +
                "</title><rect x=\"" + std::to_string(x) + "\" y=\"" + std::to_string(y) + "\" width=\"" +
                std::to_string(kBoxW) + "\" height=\"" + std::to_string(kBoxH) + "\" rx=\"3\" fill=\"" + fill +
                "\"/><text x=\"" + std::to_string(x + kBoxW / 2) + "\" y=\"" + std::to_string(y + 15) +
                "\" class=\"op\">" + xml_escape(op_label(r->op)) + "</text></g>\n";
        x += kBoxW + kGap;
      }
      body += "<text x=\"" + std::to_string(kMargin + kLabelW + max_row + 8) + "\" y=\"" + std::to_string(y + 15) +
              "\" class=\"us\">" + num(g.estimated_us) + " us</text>\n";
      y += kRowH;
    }
    body += "</g>\n";
    y += 16;
  }
  const int height = y + kMargin;

  std::string svg = "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"" + std::to_string(width) + "\" height=\"" +
                    std::to_string(height) + "\" viewBox=\"0 0 " + std::to_string(width) + " " +
                    std::to_string(height) + "\" font-family=\"sans-serif\" font-size=\"11\">\n";
  svg += "<defs><marker id=\"arrow\" viewBox=\"0 0 10 10\" refX=\"8\" refY=\"5\" markerWidth=\"6\" "
         "markerHeight=\"6\" orient=\"auto\"><path d=\"M0,0 L10,5 L0,10 z\" fill=\"" +
         std::string(kCopyColor) + "\"/></marker></defs>\n";
  svg += "<style>.h{font-size:14px;font-weight:bold}.t{font-weight:bold}.op{fill:#fff;text-anchor:middle;"
         "font-size:9px}.us{fill:#555}.copy{stroke:" +
         std::string(kCopyColor) + ";stroke-width:2;stroke-dasharray:3 2}</style>\n";
  svg += "<rect width=\"100%\" height=\"100%\" fill=\"#fff\"/>\n";
  svg += body;
  svg += "</svg>\n";
  return svg;
}

std::string render_plan_html(const std::string& heading, const std::vector<TitledPlan>& plans) {
  std::string html = "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n<title>" +
                     xml_escape(heading) + "</title>\n";
  html += "<style>body{font-family:sans-serif;margin:16px}table{border-collapse:collapse;margin:8px 0 16px}"
          "td,th{border:1px solid #ccc;padding:2px 8px;text-align:right}th:first-child,td:first-child{text-align:left}"
          "</style>\n</head>\n<body>\n";
  html += "<h1>" + xml_escape(heading) + "</h1>\n";
  for (const TitledPlan& p : plans) {
    const Totals t = totals_of(p.plan);
    html += "<h2>" + xml_escape(p.title) + " (" + std::to_string(p.plan.n_tokens) + " token" +
            (p.plan.n_tokens == 1 ? "" : "s") + ")</h2>\n<table>\n<tr><th>backend</th><th>nodes</th>"
            "<th>estimated us</th><th>activation memory</th></tr>\n";
    for (const auto& [b, bytes] : p.plan.activation_bytes) {
      const auto us = t.us.find(b);
      const auto nodes = t.nodes.find(b);
      html += "<tr><td>" + xml_escape(b) + "</td><td>" + std::to_string(nodes != t.nodes.end() ? nodes->second : 0) +
              "</td><td>" + num(us != t.us.end() ? us->second : 0.0) + "</td><td>" + bytes_text(bytes) + "</td></tr>\n";
    }
    html += "<tr><td>copies</td><td>" + std::to_string(p.plan.n_copies) + "</td><td>" +
            num(p.plan.estimated_copy_us) + "</td><td></td></tr>\n</table>\n";
  }
  html += render_plan_svg(heading, plans);
  html += "<p>Hover a box for the node, its backend, estimated time and the scheduler's reason.</p>\n</body>\n</html>\n";
  return html;
}

}  // namespace geniex::cli
