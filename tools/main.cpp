// `geniex`: run, chat with, inspect and benchmark on-device LLMs. One file per subcommand
// (cmd_*.cpp); this file registers them and dispatches.
#include <cstdio>
#include <exception>
#include <string>
#include <vector>

#include <fmt/core.h>

#include "common.hpp"

namespace {

using geniex::cli::Command;

std::string overview(const CLI::App& root) {
  std::string out = fmt::format("geniex {}: on-device LLM runtime\n\n", geniex::version());
  out += "usage: geniex <command> [options]   (geniex <command> --help for its options)\n\ncommands:\n";
  for (const CLI::App* sub : root.get_subcommands([](const CLI::App*) { return true; })) {
    out += fmt::format("  {:<12} {}\n", sub->get_name(), sub->get_description());
  }
  out += "\noptions:\n  -h, --help   this list\n  --version    print the version\n";
  return out;
}

int run_main(int argc, char** argv) {
  CLI::App root{"GenieX: on-device LLM runtime", "geniex"};
  root.set_help_flag("-h,--help", "print this help and exit");
  root.set_version_flag("--version", std::string("geniex ") + std::string(geniex::version()));
  root.fallthrough(false);
  // A repeated option keeps its last value (scripts append overrides); --stop collects all.
  root.option_defaults()->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);

  std::vector<Command> commands;
  commands.push_back(geniex::cli::make_run_command(root));
  commands.push_back(geniex::cli::make_chat_command(root));
  commands.push_back(geniex::cli::make_info_command(root));
  commands.push_back(geniex::cli::make_tokenize_command(root));
  commands.push_back(geniex::cli::make_detokenize_command(root));
  commands.push_back(geniex::cli::make_bench_command(root));
  commands.push_back(geniex::cli::make_plan_command(root));
  commands.push_back(geniex::cli::make_perplexity_command(root));
  commands.push_back(geniex::cli::make_quantize_command(root));
  commands.push_back(geniex::cli::make_convert_command(root));
  commands.push_back(geniex::cli::make_calibrate_command(root));

  CLI::App* help = root.add_subcommand("help", "list the commands, or show one command's options");
  std::string help_topic;
  help->add_option("command", help_topic, "command to describe");

  try {
    root.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    return root.exit(e);
  } catch (const CLI::CallForAllHelp& e) {
    return root.exit(e);
  } catch (const CLI::CallForVersion& e) {
    return root.exit(e);
  } catch (const CLI::ParseError& e) {
    std::string where = "geniex";
    for (const CLI::App* sub : root.get_subcommands()) where += " " + sub->get_name();
    fmt::print(stderr, "geniex: error: {}\n(run '{} --help' for usage)\n", e.what(), where);
    return geniex::cli::kExitUsage;
  }

  if (help->parsed()) {
    // CLI11 lets a sibling's name inside `help` select that sibling: `geniex help run`
    // parses as help + run.
    for (const Command& c : commands) {
      if (c.app->parsed()) help_topic = c.app->get_name();
    }
    if (help_topic.empty()) {
      fmt::print("{}", overview(root));
      return 0;
    }
    for (const Command& c : commands) {
      if (c.app->get_name() == help_topic) {
        fmt::print("{}", c.app->help());
        return 0;
      }
    }
    fmt::print(stderr, "geniex: error: unknown command '{}'\n{}", help_topic, overview(root));
    return geniex::cli::kExitUsage;
  }
  for (const Command& c : commands) {
    if (c.app->parsed()) return c.run();
  }
  fmt::print(stderr, "{}", overview(root));
  return geniex::cli::kExitUsage;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    return run_main(argc, argv);
  } catch (const std::exception& e) {
    std::fflush(stdout);
    fmt::print(stderr, "geniex: error: Internal: unexpected exception: {}\n", e.what());
    return geniex::cli::kExitError;
  }
}
