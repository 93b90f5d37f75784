// geniex perplexity: the model's perplexity on a text, computed the way llama.cpp's perplexity
// tool does so the numbers compare: the tokens are cut into chunks of --ctx-size tokens (BOS
// replaces each chunk's first token when the model adds one), each chunk is evaluated from an
// empty cache, and only the second half of each chunk is scored (every scored token has at
// least ctx/2 tokens of context).
#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

#include <fmt/core.h>
#include <nlohmann/json.hpp>

#include "common.hpp"

namespace geniex::cli {
namespace {

struct PerplexityOptions {
  ModelOptions model;
  std::string file;
  int32_t chunks = 0;  // 0: all
  bool json = false;
};

int run_perplexity(PerplexityOptions opts) {
  Result<std::string> text = read_file(opts.file);
  if (!text) return report_error(text.error());
  if (opts.model.ctx_size <= 0) opts.model.ctx_size = 512;
  const int32_t n_ctx = opts.model.ctx_size;
  if (n_ctx < 8) return report_error("--ctx-size must be at least 8");
  Result<Model> model = load_model(opts.model);
  if (!model) return report_error(model.error());
  Result<std::vector<int32_t>> tokens = model->tokenize(*text, /*add_special=*/true, /*parse_special=*/false);
  if (!tokens) return report_error(tokens.error());
  Result<std::vector<int32_t>> bos_probe = model->tokenize("", /*add_special=*/true, false);
  const bool add_bos = bos_probe && !bos_probe->empty();
  const int32_t bos = add_bos ? bos_probe->front() : -1;

  int32_t n_chunks = static_cast<int32_t>(tokens->size() / static_cast<size_t>(n_ctx));
  if (opts.chunks > 0) n_chunks = std::min(n_chunks, opts.chunks);
  if (n_chunks < 1) {
    return report_error(fmt::format("the text has {} tokens, fewer than one chunk of {} (use a longer text "
                                    "or a smaller --ctx-size)", tokens->size(), n_ctx));
  }
  const int32_t n_vocab = model->info().n_vocab;
  const int32_t first = n_ctx / 2;
  double nll_sum = 0, nll2_sum = 0;
  int64_t count = 0;
  std::vector<double> chunk_ppl;
  if (!opts.json) {
    fmt::print(stderr, "perplexity: {} tokens, {} chunks of {}, scoring tokens {}..{} of each\n", tokens->size(),
               n_chunks, n_ctx, first + 1, n_ctx - 1);
  }
  for (int32_t c = 0; c < n_chunks; ++c) {
    std::vector<int32_t> chunk(tokens->begin() + static_cast<std::ptrdiff_t>(c) * n_ctx,
                               tokens->begin() + static_cast<std::ptrdiff_t>(c + 1) * n_ctx);
    if (add_bos) chunk[0] = bos;
    Result<Session> session = model->new_session();
    if (!session) return report_error(session.error());
    Result<std::span<const float>> logits = session->eval(chunk, /*all_logits=*/true);
    if (!logits) return report_error(logits.error());
    for (int32_t j = first; j < n_ctx - 1; ++j) {
      const float* row = logits->data() + static_cast<size_t>(j) * static_cast<size_t>(n_vocab);
      float max = row[0];
      for (int32_t v = 1; v < n_vocab; ++v) max = std::max(max, row[v]);
      double sum = 0;
      for (int32_t v = 0; v < n_vocab; ++v) sum += std::exp(static_cast<double>(row[v] - max));
      const double nll = std::log(sum) - static_cast<double>(row[chunk[static_cast<size_t>(j) + 1]] - max);
      nll_sum += nll;
      nll2_sum += nll * nll;
      ++count;
    }
    chunk_ppl.push_back(std::exp(nll_sum / static_cast<double>(count)));
    if (!opts.json) {
      fmt::print("[{}]{:.4f}{}", c + 1, chunk_ppl.back(), c + 1 == n_chunks ? "\n" : ",");
      std::fflush(stdout);
    }
  }
  const double mean = nll_sum / static_cast<double>(count);
  const double var = std::max(0.0, nll2_sum / static_cast<double>(count) - mean * mean);
  const double ppl = std::exp(mean);
  const double ppl_err = count > 1 ? ppl * std::sqrt(var / static_cast<double>(count - 1)) : 0.0;
  if (opts.json) {
    nlohmann::json j = {{"model", model->info().path}, {"file", opts.file}, {"n_ctx", n_ctx},
                        {"n_tokens", tokens->size()}, {"n_chunks", n_chunks}, {"scored_tokens", count},
                        {"ppl", ppl}, {"ppl_stderr", ppl_err}, {"chunk_ppl", chunk_ppl}};
    fmt::print("{}\n", j.dump(1));
  } else {
    fmt::print("Final estimate: PPL = {:.4f} +/- {:.5f}\n", ppl, ppl_err);
  }
  return 0;
}

}  // namespace

Command make_perplexity_command(CLI::App& root) {
  auto opts = std::make_shared<PerplexityOptions>();
  CLI::App* app = root.add_subcommand("perplexity", "perplexity of a model on a text file (llama.cpp's method; -c defaults to 512)");
  add_model_options(*app, opts->model, /*with_threads=*/true, /*with_ctx=*/true, /*with_device=*/true);
  app->add_option("-f,--file", opts->file, "text file to score")->required();
  app->add_option("--chunks", opts->chunks, "score at most this many chunks (default: all)");
  app->add_flag("--json", opts->json, "print the result as JSON");
  return Command{app, [opts] { return run_perplexity(*opts); }};
}

}  // namespace geniex::cli
