// geniex convert HF_DIR -o OUT.gguf --type TYPE: a Hugging Face model folder (config.json,
// safetensors, tokenizer.json) to a GGUF file (src/convert/hf_import.cpp), written to OUT.part
// and renamed when complete, with a progress bar.
#include <cstdio>
#include <filesystem>
#include <memory>
#include <optional>
#include <string>

#include <fmt/core.h>

#include "common.hpp"
#include "convert/hf_import.hpp"
#include "progress.hpp"

namespace geniex::cli {
namespace {

struct ConvertCliOptions {
  std::string in;
  std::string out;
  std::string type = "keep";
  bool force = false;
  bool keep_bf16 = false;
};

int run(const ConvertCliOptions& opts) {
  namespace fs = std::filesystem;
  std::error_code ec;
  if (!convert::is_hf_folder(opts.in)) {
    return report_error(make_error(ErrorCode::NotFound, "'" + opts.in + "' is not a folder with a config.json"));
  }
  if (fs::exists(opts.out, ec) && !opts.force) {
    return report_error(make_error(ErrorCode::InvalidArgument,
                                   "'" + opts.out + "' exists (--force overwrites it)"));
  }
  convert::ImportOptions o;
  o.keep_bf16 = opts.keep_bf16;
  if (opts.type != "keep") {
    Result<DType> t = convert::parse_output_type(opts.type);
    if (!t) return report_error(t.error());
    o.type = *t;
  }
  std::unique_ptr<ProgressBar> bar;
  o.progress = [&](size_t done, size_t total, uint64_t, uint64_t) {
    if (!bar) bar = std::make_unique<ProgressBar>("convert", total);
    bar->update(done);
  };
  convert::ImportReport rep;
  Result<gguf::Writer> w = convert::import_hf(opts.in, o, &rep);
  if (bar) bar->finish();
  bar.reset();
  if (!w) return report_error(w.error());

  const std::string part = opts.out + ".part";
  Status st = w->write_file(part);
  if (st) {
    fs::rename(part, opts.out, ec);
    if (ec) st = make_error(ErrorCode::IoError, "cannot rename '" + part + "' to '" + opts.out + "': " + ec.message());
  }
  if (!st) {
    fs::remove(part, ec);
    return report_error(st.error());
  }
  for (const std::string& note : rep.notes) fmt::print(stderr, "note: {}\n", note);
  fmt::print("converted {} -> {} ({}, weights {})\n", basename_of(opts.in), basename_of(opts.out), rep.architecture,
             opts.type);
  fmt::print("  tensors: {} ({} parameters){}\n", rep.n_tensors, format_count(static_cast<double>(rep.n_params)),
             rep.has_tokenizer ? ", with tokenizer" : ", no tokenizer");
  fmt::print("  size:    {} of safetensors data -> {} of tensor data\n",
             format_bytes(static_cast<double>(rep.source_bytes)), format_bytes(static_cast<double>(rep.output_bytes)));
  return 0;
}

}  // namespace

Command make_convert_command(CLI::App& root) {
  auto opts = std::make_shared<ConvertCliOptions>();
  CLI::App* app = root.add_subcommand("convert", "convert a Hugging Face model folder to a GGUF file");
  app->add_option("input", opts->in, "model folder (config.json, *.safetensors, tokenizer.json)")->required();
  app->add_option("-o,--output", opts->out, "GGUF file to write")->required();
  app->add_option("--type", opts->type,
                  "weight type: keep (F32/F16 as stored, BF16 as F32), f32, f16, bf16, q8_0, q4_0, q4_1, q5_0, "
                  "q5_1, q4_k, q5_k, q6_k")
      ->capture_default_str();
  app->add_flag("--keep-bf16", opts->keep_bf16, "with --type keep: store BF16 weights as BF16");
  app->add_flag("--force", opts->force, "overwrite the output file if it exists");
  return Command{app, [opts] { return run(*opts); }};
}

}  // namespace geniex::cli
