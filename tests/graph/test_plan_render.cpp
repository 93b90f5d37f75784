// `geniex plan --svg/--html` pictures: well-formed markup (tags balanced, text escaped), every
// node of every plan drawn once with its backend's colour, copies as arrows, the legend and
// totals present, and the same plans rendering to the same bytes.
#include <gtest/gtest.h>

#include <random>
#include <set>
#include <string>
#include <vector>

#include "plan_render.hpp"

namespace geniex {
namespace {

using cli::TitledPlan;

PlanSummary make_plan(int32_t n_tokens, uint32_t seed) {
  std::mt19937 rng(seed);
  PlanSummary p;
  p.n_tokens = n_tokens;
  const char* ops[] = {"rms_norm", "matmul", "matmul", "rope", "attention", "add", "swiglu"};
  int32_t id = 0;
  p.rows.push_back({id++, "inp_tokens", "input", "i32", "1", "cpu", "input, written where its first reader runs", -1, 0});
  p.rows.push_back({id++, "inp_embd", "get_rows", "q8_0", "64x1", "cpu", "preferred", -1, 1.5});
  for (int32_t layer = 0; layer < 3; ++layer) {
    for (const char* op : ops) {
      const bool gpu = rng() % 2 == 0;
      if (gpu && layer == 1) {
        p.rows.push_back({id++, "blk." + std::to_string(layer) + ".x.to_opencl", "copy", "f32", "64x1", "opencl",
                          "copy from cpu", layer, 3.25});
      }
      p.rows.push_back({id++, "blk." + std::to_string(layer) + "." + op, op, "f32", "64x1", gpu ? "opencl" : "cpu",
                        gpu ? "cost: opencl 4.0us < cpu 9.0us" : "cost: cpu 2.0us < opencl 15.0us", layer,
                        static_cast<double>(rng() % 1000) / 10.0});
    }
  }
  // A name that must be escaped.
  p.rows.push_back({id++, "output<&>\"'", "matmul", "f16", "96x1", "cpu", "fallback: opencl: no <F16> & more", -1, 7});
  p.n_copies = 1;
  p.n_splits = 4;
  p.activation_bytes = {{"opencl", 4096}, {"cpu", 3 << 20}};
  p.estimated_us = {{"opencl", 40.5}, {"cpu", 123.25}};
  p.estimated_copy_us = 3.25;
  return p;
}

// Tag balance of a markup document: every <a ...> closed by </a> in order; self-closing tags,
// comments, <!DOCTYPE> and the given void elements stand alone. Returns "" or the problem.
std::string check_balanced(const std::string& doc, const std::set<std::string>& void_elements) {
  std::vector<std::string> stack;
  size_t i = 0;
  while ((i = doc.find('<', i)) != std::string::npos) {
    const size_t end = doc.find('>', i);
    if (end == std::string::npos) return "unterminated tag at " + std::to_string(i);
    const std::string tag = doc.substr(i + 1, end - i - 1);
    i = end + 1;
    if (tag.empty()) return "empty tag";
    if (tag[0] == '!' || tag[0] == '?') continue;
    if (tag.back() == '/') continue;
    if (tag[0] == '/') {
      const std::string name = tag.substr(1);
      if (stack.empty() || stack.back() != name) return "unexpected </" + name + ">";
      stack.pop_back();
      continue;
    }
    const std::string name = tag.substr(0, tag.find_first_of(" \n\t"));
    if (void_elements.count(name) == 0) stack.push_back(name);
  }
  if (!stack.empty()) return "unclosed <" + stack.back() + ">";
  // Text and attributes carry no raw '&' other than entities.
  for (size_t a = doc.find('&'); a != std::string::npos; a = doc.find('&', a + 1)) {
    const size_t semi = doc.find(';', a);
    if (semi == std::string::npos || semi - a > 6) return "raw & at " + std::to_string(a);
  }
  return "";
}

size_t count(const std::string& s, const std::string& what) {
  size_t n = 0;
  for (size_t at = s.find(what); at != std::string::npos; at = s.find(what, at + 1)) ++n;
  return n;
}

TEST(PlanRender, SvgIsWellFormedAndDrawsEveryNode) {
  const std::vector<TitledPlan> plans = {{"decode", make_plan(1, 11)}, {"prefill", make_plan(128, 12)}};
  const std::string svg = cli::render_plan_svg("model.gguf, device gpu", plans);
  EXPECT_EQ(check_balanced(svg, {}), "");
  EXPECT_EQ(svg.rfind("<svg xmlns=\"http://www.w3.org/2000/svg\"", 0), 0u);
  size_t rows = 0, copies = 0;
  for (const TitledPlan& p : plans) {
    rows += p.plan.rows.size();
    for (const PlanRow& r : p.plan.rows) copies += r.op == "copy";
  }
  EXPECT_EQ(count(svg, "data-node=\""), rows);
  // Copies are arrows with the marker (plus the one in the legend).
  EXPECT_EQ(count(svg, "marker-end=\"url(#arrow)\""), copies + 1);
  // Legend: both backends and the copy sign; colours: cpu first in the palette.
  EXPECT_NE(svg.find(">cpu</text>"), std::string::npos);
  EXPECT_NE(svg.find(">opencl</text>"), std::string::npos);
  EXPECT_NE(svg.find("copy between backends"), std::string::npos);
  EXPECT_NE(svg.find("fill=\"#4e79a7\"/><text x=\"34\" y=\"51\">cpu"), std::string::npos);
  // Totals per plan and per layer row.
  EXPECT_NE(svg.find("decode: 1 token, opencl 40.5 us, cpu 123.2 us, copies 1 (3.2 us), estimated total 167.0 us"),
            std::string::npos);
  EXPECT_NE(svg.find("prefill: 128 tokens"), std::string::npos);
  EXPECT_NE(svg.find("activation memory: opencl 4.0 KiB cpu 3.00 MiB"), std::string::npos);
  for (const char* label : {">input</text>", ">layer 0</text>", ">layer 2</text>", ">output</text>"}) {
    EXPECT_NE(svg.find(label), std::string::npos) << label;
  }
  // Escaped, never raw.
  EXPECT_EQ(svg.find("output<&>"), std::string::npos);
  EXPECT_NE(svg.find("output&lt;&amp;&gt;&quot;&apos;"), std::string::npos);
  EXPECT_NE(svg.find("no &lt;F16&gt; &amp; more"), std::string::npos);
}

TEST(PlanRender, DeterministicAndSensitiveToThePlan) {
  const std::vector<TitledPlan> a = {{"decode", make_plan(1, 5)}};
  const std::vector<TitledPlan> b = {{"decode", make_plan(1, 5)}};
  EXPECT_EQ(cli::render_plan_svg("h", a), cli::render_plan_svg("h", b));
  EXPECT_EQ(cli::render_plan_html("h", a), cli::render_plan_html("h", b));
  std::vector<TitledPlan> c = a;
  c[0].plan.rows[3].backend = c[0].plan.rows[3].backend == "cpu" ? "opencl" : "cpu";
  EXPECT_NE(cli::render_plan_svg("h", a), cli::render_plan_svg("h", c));
}

TEST(PlanRender, HtmlIsSelfContained) {
  const std::vector<TitledPlan> plans = {{"decode", make_plan(1, 3)}};
  const std::string html = cli::render_plan_html("model <x>", plans);
  EXPECT_EQ(check_balanced(html, {"meta"}), "");
  EXPECT_EQ(html.rfind("<!DOCTYPE html>", 0), 0u);
  EXPECT_NE(html.find("<svg"), std::string::npos);
  EXPECT_NE(html.find("<title>model &lt;x&gt;</title>"), std::string::npos);
  EXPECT_NE(html.find("<td>opencl</td><td>"), std::string::npos);
  EXPECT_NE(html.find("<td>copies</td><td>1</td><td>3.2</td>"), std::string::npos);
  // Nothing fetched from elsewhere: no scripts, no external references.
  EXPECT_EQ(html.find("<script"), std::string::npos);
  EXPECT_EQ(html.find("src="), std::string::npos);
  EXPECT_EQ(html.find("href="), std::string::npos);
  EXPECT_EQ(html.find("@import"), std::string::npos);
}

TEST(PlanRender, EmptyPlanStillRenders) {
  const std::vector<TitledPlan> plans = {{"decode", PlanSummary{}}};
  const std::string svg = cli::render_plan_svg("", plans);
  EXPECT_EQ(check_balanced(svg, {}), "");
  EXPECT_EQ(count(svg, "data-node=\""), 0u);
}

}  // namespace
}  // namespace geniex
