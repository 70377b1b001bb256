// Flags: every numeric flag of every cutrain subcommand refuses NaN, infinities, hex, overflow
// and out-of-range values, and every switch refuses a value that is not on or off (app/flags.h).
// The first test walks the whole command line, so a flag added later without app/flags.h fails it.
#include <catch2/catch.hpp>

#include <algorithm>

#include "app/commands.h"
#include "app/flags.h"
#include "app/version.h"
#include "tests/process.h"

namespace {

// The message of the error parsing `args` throws; "" when it parses.
std::string parse_error(CLI::App& app, const std::string& args) {
  try {
    app.parse(args);
  } catch (const CLI::ParseError& e) {
    return e.what();
  }
  return "";
}

// The whole `cutrain` command line, with callbacks that do nothing: parsing only.
struct CommandLine {
  CLI::App app;
  int exit_code = 0;
  CommandLine() {
    cutrain::add_commands(app, exit_code);
    for (CLI::App* sub : app.get_subcommands([](CLI::App*) { return true; })) sub->callback([] {});
  }
};

}  // namespace

TEST_CASE("every numeric flag of every subcommand refuses NaN, infinities, hex and overflow", "[app]") {
  CommandLine cli;
  std::vector<std::pair<std::string, CLI::App*>> commands = {{"", &cli.app}};  // --local_rank is the app's
  for (CLI::App* sub : cli.app.get_subcommands([](CLI::App*) { return true; })) commands.push_back({sub->get_name(), sub});
  int numbers = 0, switches = 0;
  for (const auto& [command, app] : commands) {
    // The app's own flags need a subcommand after them.
    const std::string before = command.empty() ? "" : command + " ", after = command.empty() ? " info" : "";
    for (const CLI::Option* option : app->get_options()) {
      const std::string name = option->get_name();
      if (name == "--help" || name == "--version" || option->get_type_name().rfind("TEXT", 0) == 0) continue;
      INFO(before + name + " (" + option->get_type_name() + ")");
      if (option->get_expected_min() == 0) {  // a switch
        ++switches;
        CHECK_THAT(parse_error(cli.app, before + name + "=2" + after), Catch::Contains("is not one of true/false"));
        continue;
      }
      ++numbers;
      for (const char* bad : {"nan", "inf", "-inf", "0x10", "1e999", "1e308", "-1e308", "99999999999999999999999",
                              "-99999999999999999999999", "12abc", "1,5"}) {
        INFO("value " << bad);
        const std::string error = parse_error(cli.app, before + name + "=" + bad + after);
        CHECK_THAT(error, Catch::StartsWith(name + ": " + bad + " is not a"));
      }
    }
  }
  CHECK(numbers >= 40);  // that the walk saw the flags at all
  CHECK(switches >= 6);
}

TEST_CASE("add_number reads plain decimal numbers in its range, and --help says the range", "[app]") {
  CLI::App app;
  int epochs = 0;
  uint64_t seed = 0;
  double lr = 0;
  int64_t bytes = 0;
  bool nesterov = true;
  cutrain::add_number(&app, "--epochs", epochs, "Epochs", 1, 100);
  cutrain::add_number(&app, "--seed", seed, "Seed", 0, UINT64_MAX);
  cutrain::add_number(&app, "--lr", lr, "Learning rate", 0, 10);
  cutrain::add_byte_size(&app, "--bytes", bytes, "Message size", 4, int64_t(1) << 30);
  cutrain::add_switch(&app, "--nesterov,!--no-nesterov", nesterov, "Nesterov");

  app.parse("--epochs 010 --seed 18446744073709551615 --lr 1e-3 --bytes 64K --no-nesterov");
  CHECK(epochs == 10);  // decimal, not CLI11's octal 8
  CHECK(seed == UINT64_MAX);
  CHECK(lr == 1e-3);
  CHECK(bytes == 65536);
  CHECK(!nesterov);
  app.parse("--bytes 16MiB --nesterov=off --lr 10");
  CHECK(bytes == 16 << 20);
  CHECK(!nesterov);
  CHECK(lr == 10);

  CHECK_THAT(parse_error(app, "--epochs 101"), Catch::Equals("--epochs: 101 is not a decimal integer in [1, 100]"));
  CHECK_THAT(parse_error(app, "--epochs 0"), Catch::Contains("0 is not a decimal integer in [1, 100]"));
  CHECK_THAT(parse_error(app, "--seed=-1"), Catch::Contains("-1 is not a decimal integer"));  // no wrap to 2^64 - 1
  CHECK_THAT(parse_error(app, "--seed 18446744073709551616"), Catch::Contains("is not a decimal integer"));
  CHECK_THAT(parse_error(app, "--lr 10.5"), Catch::Equals("--lr: 10.5 is not a finite decimal number in [0, 10]"));
  CHECK_THAT(parse_error(app, "--bytes 2G"), Catch::Contains("2147483648 is not a decimal integer in [4, 1073741824]"));
  CHECK_THAT(parse_error(app, "--bytes 1T"), Catch::Contains("1T is not a size such as 4096, 64K or 16M"));
  CHECK_THAT(parse_error(app, "--nesterov=2"), Catch::Contains("2 is not one of true/false"));
  CHECK_THAT(parse_error(app, "--no-nesterov=2"), Catch::Contains("is not one of true/false"));

  const std::string help = app.help();
  CHECK_THAT(help, Catch::Contains("--epochs INT in [1, 100]"));
  CHECK_THAT(help, Catch::Contains("--lr NUMBER in [0, 10]"));
  CHECK_THAT(help, Catch::Contains("--bytes SIZE in [4, 1073741824]"));
}

TEST_CASE("add_number_list reads a list of decimal numbers in its range, and refuses the whole list in one line",
          "[app]") {
  CLI::App app;
  std::vector<double> milestones = {0.5, 0.75}, mean = {0.1, 0.2, 0.3};
  cutrain::add_number_list(&app, "--milestones", milestones, "Milestones", 0, 1, 1, 3, /*increasing=*/true);
  cutrain::add_number_list(&app, "--mean", mean, "Mean", 0, 1, 3, 3, /*increasing=*/false);
  app.parse("--milestones 0.25 --mean 0.5,0.5,0");
  CHECK(milestones == std::vector<double>{0.25});
  CHECK(mean == std::vector<double>{0.5, 0.5, 0});
  app.parse("--milestones 0,0.5,1");
  CHECK(milestones == std::vector<double>{0, 0.5, 1});

  const std::string milestones_kind = " is not a list of 1 to 3 increasing finite decimal numbers in [0, 1]";
  for (const char* bad : {"0.75,0.5", "0.5,0.5", "0.1,0.2,0.3,0.4", "0.5,", ",0.5", "0.5;0.75", "1.5", "-0.1"}) {
    INFO("value " << bad);
    CHECK(parse_error(app, std::string("--milestones=") + bad) ==
          std::string("--milestones: ") + bad + milestones_kind);
  }
  CHECK(parse_error(app, "--mean 0.5,0.5") == "--mean: 0.5,0.5 is not a list of 3 finite decimal numbers in [0, 1]");

  const std::string help = app.help();
  CHECK_THAT(help, Catch::Contains("--milestones LIST of NUMBER in [0, 1]=0.5,0.75"));
  CHECK_THAT(help, Catch::Contains("--mean LIST of NUMBER in [0, 1]=0.1,0.2,0.3"));
}

TEST_CASE("a nonsense number to cutrain train: one line naming the flag, before anything runs", "[app]") {
  const auto r = cutrain::test::run({cutrain::test::binary("cutrain"), "train", "--lr", "nan", "--device", "cpu"});
  CHECK(r.exit_code == 2);
  CHECK(r.output ==
        "cutrain: error: --lr: nan is not a finite decimal number in [0, 1e+06] (see cutrain train --help)\n");
  const auto help = cutrain::test::run({cutrain::test::binary("cutrain"), "train", "--help"});
  CHECK_THAT(help.output, Catch::Contains("--weight-decay NUMBER in [0, 1]"));
  CHECK_THAT(help.output, Catch::Contains("--norm-weight-decay NUMBER in [0, 1]"));
  CHECK_THAT(help.output, Catch::Contains("--clip-grad-norm NUMBER in [0, 1e+06]"));
  const auto clip = cutrain::test::run({cutrain::test::binary("cutrain"), "train", "--clip-grad-norm", "-0.5"});
  CHECK(clip.exit_code == 2);
  CHECK(clip.output ==
        "cutrain: error: --clip-grad-norm: -0.5 is not a finite decimal number in [0, 1e+06] (see cutrain train "
        "--help)\n");
  CHECK_THAT(help.output, Catch::Contains("--seed INT in [0, 18446744073709551615]"));
  CHECK_THAT(help.output, Catch::Contains("--lr-milestones LIST of NUMBER in [0, 1]=0.5,0.75"));
  CHECK_THAT(help.output, Catch::Contains("--lr-gamma NUMBER in [0, 1]=0.1"));
  CHECK_THAT(help.output, Catch::Contains("--model-ema,--no-model-ema"));
  CHECK_THAT(help.output, Catch::Contains("--model-ema-steps INT in [1, 1073741824]=32"));
  CHECK_THAT(help.output, Catch::Contains("--model-ema-decay NUMBER in [0, 1]=0.99998"));
  struct Bad {
    std::string flag, value, why;
  };
  for (const Bad& bad : {Bad{"--model-ema-steps", "0", "0 is not a decimal integer in [1, 1073741824]"},
                         Bad{"--model-ema-decay", "1.5", "1.5 is not a finite decimal number in [0, 1]"}}) {
    const auto refused = cutrain::test::run(
        {cutrain::test::binary("cutrain"), "train", "--model-ema", bad.flag, bad.value, "--device", "cpu"});
    CHECK(refused.exit_code == 2);
    CHECK(refused.output == "cutrain: error: " + bad.flag + ": " + bad.why + " (see cutrain train --help)\n");
  }
}

TEST_CASE("a usage error is one line starting with cutrain:, names the option or command meant, and exits with 2",
          "[app]") {
  const std::string cutrain = cutrain::test::binary("cutrain");
  const std::vector<std::pair<std::vector<std::string>, std::string>> cases{
      {{"train", "--epoch", "3"},
       "The following arguments were not expected: 3 --epoch; did you mean --epochs? (see cutrain train --help)"},
      {{"train", "--batchsize=8"}, "did you mean --batch-size? (see cutrain train --help)"},
      {{"eval", "--chekpoint", "x"}, "--checkpoint is required; did you mean --checkpoint? (see cutrain eval --help)"},
      {{"--epochs", "3", "train"}, "3 --epochs; --epochs goes after train (see cutrain train --help)"},
      {{"train", "--zzzzzzzz"}, "The following argument was not expected: --zzzzzzzz (see cutrain train --help)"},
      {{"trian"}, "trian is not a command; did you mean train? (see cutrain --help)"},
      {{"bench-stpe"}, "bench-stpe is not a command; did you mean bench-step? (see cutrain --help)"},
      {{"xyzzy"}, "xyzzy is not a command (see cutrain --help)"},
      {{}, "A subcommand is required (see cutrain --help)"},
      {{"train", "--nesterov=2"}, "2 is not one of true/false, on/off, yes/no, 1/0 (see cutrain train --help)"},
      {{"train", "--batchnorm", "fast"},
       "--batchnorm: fast not in {cooperative,split,cudnn} (see cutrain train --help)"},
      {{"train", "--data", ""}, "--data \"\": an empty folder name (an unset variable?) (see cutrain train --help)"},
      {{"train", "--lr-milestones", "0.75,0.5"},
       "--lr-milestones: 0.75,0.5 is not a list of 1 to 8 increasing finite decimal numbers in [0, 1] (see cutrain "
       "train --help)"},
      {{"eval", "--checkpoint", "x", "--data", ""},
       "--data \"\": an empty folder name (an unset variable?) (see cutrain eval --help)"},
      {{"bench-step", "--batchnorm", "Split"},
       "--batchnorm: Split not in {cooperative,split,cudnn} (see cutrain bench-step --help)"},
  };
  for (const auto& [args, message] : cases) {
    std::vector<std::string> argv{cutrain};
    argv.insert(argv.end(), args.begin(), args.end());
    const auto r = cutrain::test::run(argv);
    INFO(r.output);
    CHECK(r.exit_code == 2);
    CHECK_THAT(r.output, Catch::StartsWith("cutrain: error: ") && Catch::EndsWith(message + "\n"));
    CHECK(std::count(r.output.begin(), r.output.end(), '\n') == 1);
  }
}

TEST_CASE("cutrain help and cutrain --version answer with the help and the version", "[app]") {
  const std::string cutrain = cutrain::test::binary("cutrain");
  const auto help = cutrain::test::run({cutrain, "help"});
  CHECK(help.exit_code == 0);
  CHECK_THAT(help.output,
             Catch::Contains("SUBCOMMAND") && Catch::Contains("bench-step") && Catch::Contains("--version"));
  const auto train_help = cutrain::test::run({cutrain, "help", "train"});
  CHECK(train_help.exit_code == 0);
  CHECK(train_help.output == cutrain::test::run({cutrain, "train", "--help"}).output);
  // An on/off switch says its default in its help; CLI11's "{false}" after --no-nesterov read as one.
  CHECK_THAT(train_help.output, Catch::Contains("--nesterov,--no-nesterov    Nesterov momentum (default on)"));
  CHECK_THAT(train_help.output, !Catch::Contains("{false}") && !Catch::Contains("{true}"));

  const auto version = cutrain::test::run({cutrain, "--version"});
  CHECK(version.exit_code == 0);
  CHECK(version.output == cutrain::version_line() + "\n");
  CHECK_THAT(version.output,
             Catch::Matches("cutrain [0-9]+\\.[0-9]+\\.[0-9]+ \\(commit ([0-9a-f]{7,}(-dirty)?|unknown)\\)\n"));
  CHECK_THAT(cutrain::test::run({cutrain, "info"}).output, Catch::StartsWith(cutrain::version_line() + "\n"));
}

TEST_CASE("the training banner names the version and counts in the singular for one", "[app]") {
  const auto r = cutrain::test::run({cutrain::test::binary("cutrain"), "train", "--device", "cpu", "--synthetic-train",
                                     "16", "--synthetic-test", "8", "--batch-size", "16", "--epochs", "1", "--width",
                                     "1", "--eval-every", "0", "--workers", "1"});
  INFO(r.output);
  CHECK(r.exit_code == 0);
  CHECK_THAT(r.output, Catch::Contains(cutrain::version_line() + ": ResNet-18, cifar stem"));
  CHECK_THAT(r.output, Catch::Contains(", 1 step per epoch, 1 epoch; SGD"));
}
