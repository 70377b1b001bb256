#include "app/commands.h"

#include <algorithm>
#include <cstdlib>
#include <iostream>
#include <string>
#include <vector>

#include "app/flags.h"
#include "app/version.h"

namespace cutrain {
namespace {

// The single-character edits (insertions, deletions, substitutions, and swaps of two neighbours)
// that turn `a` into `b`: "--epoch" is one from "--epochs", "trian" one from "train".
size_t edit_distance(const std::string& a, const std::string& b) {
  std::vector<std::vector<size_t>> d(a.size() + 1, std::vector<size_t>(b.size() + 1));
  for (size_t i = 0; i <= a.size(); ++i) d[i][0] = i;
  for (size_t j = 0; j <= b.size(); ++j) d[0][j] = j;
  for (size_t i = 1; i <= a.size(); ++i)
    for (size_t j = 1; j <= b.size(); ++j) {
      d[i][j] = std::min({d[i - 1][j] + 1, d[i][j - 1] + 1, d[i - 1][j - 1] + (a[i - 1] != b[j - 1])});
      if (i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1])
        d[i][j] = std::min(d[i][j], d[i - 2][j - 2] + 1);
    }
  return d[a.size()][b.size()];
}

// The name in `names` nearest to `word` when it is close enough to be a slip of the keyboard (at
// most two edits, and no more than one per three characters of `word`); "" when none is.
std::string nearest(const std::string& word, const std::vector<std::string>& names) {
  std::string best;
  size_t best_distance = std::min<size_t>(2, word.size() / 3) + 1;
  for (const std::string& name : names) {
    const size_t distance = edit_distance(word, name);
    if (distance < best_distance) best = name, best_distance = distance;
  }
  return best;
}

// The long names ("--epochs") of `command`'s options, and of the app's, which its options fall through to.
std::vector<std::string> option_names(const CLI::App* command) {
  std::vector<std::string> names;
  for (const CLI::App* app = command; app; app = app->get_parent())
    for (const CLI::Option* option : app->get_options())
      for (const std::string& name : option->get_lnames()) names.push_back("--" + name);
  return names;
}

// The names of `app`'s subcommands: "info", "train", ...
std::vector<std::string> command_names(const CLI::App& app) {
  std::vector<std::string> names;
  for (const CLI::App* sub : app.get_subcommands([](const CLI::App*) { return true; }))
    names.push_back(sub->get_name());
  return names;
}

// A usage error as one line, with the likely meaning of a mistyped option or command:
//   cutrain: error: The following arguments were not expected: 3 --epoch; did you mean --epochs? (see
//   cutrain train --help)
//   cutrain: error: trian is not a command; did you mean train? (see cutrain --help)
std::string usage_error(const CLI::App* app, const CLI::Error& e) {
  const CLI::App* command = app;  // the subcommand the error is about, when one was given
  for (const CLI::App* sub : app->get_subcommands()) command = sub;
  std::string message = e.what();
  for (std::string word : app->remaining(true)) {
    if (command == app && !word.starts_with("-")) {
      const std::string guess = nearest(word, command_names(*app));
      message = word + " is not a command" + (guess.empty() ? "" : "; did you mean " + guess + "?");
      break;
    }
    if (word.starts_with("--")) {
      const std::string option = word.substr(0, word.find('='));
      const std::string guess = nearest(option, option_names(command));
      if (guess == option) {  // `cutrain --epochs 3 train`: the command's own option, before the command
        message += "; " + option + " goes after " + command->get_name();
        break;
      }
      if (!guess.empty()) {
        message += "; did you mean " + guess + "?";
        break;
      }
    }
  }
  const std::string help = command == app ? "cutrain --help" : "cutrain " + command->get_name() + " --help";
  return "cutrain: error: " + message + " (see " + help + ")\n";
}

// CLI11 writes an off switch's value into --help ("--nesterov,--no-nesterov{false}"), which reads
// as the switch's default. Each switch's help says its default in words instead (app/flags.h).
class HelpFormatter : public CLI::Formatter {
 public:
  std::string make_option_name(const CLI::Option* option, bool positional) const override {
    std::string name = CLI::Formatter::make_option_name(option, positional);
    for (size_t open = name.find('{'); open != std::string::npos; open = name.find('{', open))
      name.erase(open, name.find('}', open) - open + 1);
    return name;
  }
};

// `cutrain help [COMMAND]`: what `cutrain [COMMAND] --help` prints, as git and cargo have it.
void add_help_command(CLI::App& app, int& exit_code) {
  auto* cmd = app.add_subcommand("help", "Print this help, or a command's: cutrain help train");
  auto topic = std::make_shared<std::string>();
  cmd->add_option("command", *topic, "the command to explain")->check(CLI::IsMember(command_names(app)));
  cmd->callback([&app, topic, &exit_code] {
    // Not app.help(): it would explain the command that is running, `help` itself.
    const CLI::App* about = topic->empty() ? &app : app.get_subcommand(*topic);
    const std::string name = topic->empty() ? app.get_name() : app.get_name() + " " + *topic;
    std::cout << about->get_formatter()->make_help(about, name, CLI::AppFormatMode::Normal);
    exit_code = 0;
  });
}

}  // namespace

void add_commands(CLI::App& app, int& exit_code) {
  app.formatter(std::make_shared<HelpFormatter>());  // before the subcommands, which copy it
  app.failure_message(usage_error);
  app.set_version_flag("--version", version_line(), "Print the version and git commit, and exit");
  app.require_subcommand(1);
  // Subcommands inherit this: an option they do not know (--local_rank) goes to the app.
  app.fallthrough();
  add_info_command(app, exit_code);
  add_train_command(app, exit_code);
  add_eval_command(app, exit_code);
  add_bench_allreduce_command(app, exit_code);
  add_make_synthetic_command(app, exit_code);
  add_inspect_data_command(app, exit_code);
  add_inspect_command(app, exit_code);
  add_show_sampler_command(app, exit_code);
  add_bench_data_command(app, exit_code);
  add_bench_step_command(app, exit_code);
  add_help_command(app, exit_code);
  // torch.distributed.launch's way of telling a worker its GPU: `cutrain --local_rank=N train ...`
  // (or `cutrain train --local_rank=N ...`; torch 2.x's launcher spells it --local-rank) means
  // LOCAL_RANK=N, which dist_env_from_environment() reads.
  static int local_rank = 0;
  add_number(&app, "--local_rank,--local-rank", local_rank,
             "this process's GPU on its node (as LOCAL_RANK; set by launchers)", 0, 1 << 16)
      ->each([](const std::string& rank) { setenv("LOCAL_RANK", rank.c_str(), 1); })
      ->trigger_on_parse();
}

}  // namespace cutrain
