// flags.h: the one way cutrain's subcommands declare a numeric flag or an on/off switch.
//
// CLI11 on its own reads numbers as strtoll and strtold do: "0x10" is 16, "010" is 8, "nan",
// "inf" and "1e308" are doubles like any other, "-1" in an unsigned flag wraps to 2^64 - 1 and
// "99999999999999999999999" saturates. add_number reads a plain decimal number instead
// (std::from_chars: no hex, no octal, no sign on an unsigned, nothing after it), refuses NaN and
// infinities, requires [min, max], and shows that range in --help:
//
//   add_number(cmd, "--epochs", o.epochs, "Epochs", 1, 100000)->capture_default_str();
//     --epochs INT in [1, 100000]=20     Epochs
//   $ cutrain train --epochs 0x10
//   --epochs: 0x10 is not a decimal integer in [1, 100000]
//
// add_number_list takes several such numbers, separated by commas (--lr-milestones 0.5,0.75).
//
// add_switch is the same for an on/off flag: --nesterov, --no-nesterov and --nesterov=false
// are taken; --nesterov=2 is refused rather than read as "on".
#pragma once

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <optional>
#include <string>
#include <type_traits>
#include <vector>

#include <CLI/CLI.hpp>

namespace cutrain {

// "[1, 100000]", "[0, 1]", "[0, 1e+12]": the range as --help and the error say it.
template <typename T>
std::string range_text(T min, T max) {
  auto text = [](T v) {
    if constexpr (std::is_integral_v<T>) {
      return std::to_string(v);
    } else {
      char buffer[32];
      std::snprintf(buffer, sizeof buffer, "%g", double(v));
      return std::string(buffer);
    }
  };
  return "[" + text(min) + ", " + text(max) + "]";
}

// A flag taking one decimal number of `value`'s type in [min, max]. Returns the option, so that
// ->capture_default_str(), ->required() and the like chain on.
template <typename T>
CLI::Option* add_number(CLI::App* cmd, const std::string& name, T& value, const std::string& help,
                        std::type_identity_t<T> min, std::type_identity_t<T> max) {
  static_assert(std::is_arithmetic_v<T> && !std::is_same_v<T, bool>, "add_switch is for on/off flags");
  const std::string range = range_text<T>(min, max);
  const std::string kind = std::is_integral_v<T> ? "a decimal integer" : "a finite decimal number";
  auto in_range = [=](std::string& text) -> std::string {
    T parsed{};
    const char* end = text.data() + text.size();
    const auto [stop, error] = std::from_chars(text.data(), end, parsed);
    if (error != std::errc() || stop != end || !std::isfinite(double(parsed)) || parsed < min || parsed > max)
      return text + " is not " + kind + " in " + range;
    if constexpr (std::is_integral_v<T>) text = std::to_string(parsed);  // so that CLI11 never reads "010" as octal
    return std::string();
  };
  return cmd->add_option(name, value, help)
      ->transform(CLI::Validator(in_range, ""))
      ->type_name((std::is_integral_v<T> ? "INT in " : "NUMBER in ") + range);
}

// A flag taking from min_count to max_count decimal numbers in [min, max], separated by commas, each read as
// add_number reads one; with `increasing`, each larger than the one before. The whole list is refused in one
// line naming it:
//
//   --lr-milestones LIST of NUMBER in [0, 1]=0.5,0.75
//   $ cutrain train --lr-milestones 0.75,0.5
//   --lr-milestones: 0.75,0.5 is not a list of 1 to 8 increasing finite decimal numbers in [0, 1]
inline CLI::Option* add_number_list(CLI::App* cmd, const std::string& name, std::vector<double>& values,
                                    const std::string& help, double min, double max, size_t min_count, size_t max_count,
                                    bool increasing) {
  // The numbers of `text`, or nothing when it is not such a list.
  auto parse = [=](const std::string& text) -> std::optional<std::vector<double>> {
    std::vector<double> parsed;
    for (size_t begin = 0;;) {
      const size_t comma = std::min(text.find(',', begin), text.size());
      double number = 0;
      const auto [stop, error] = std::from_chars(text.data() + begin, text.data() + comma, number);
      if (error != std::errc() || stop != text.data() + comma || !std::isfinite(number) || number < min ||
          number > max || (increasing && !parsed.empty() && number <= parsed.back()))
        return std::nullopt;
      parsed.push_back(number);
      if (comma == text.size()) break;
      begin = comma + 1;
    }
    if (parsed.size() < min_count || parsed.size() > max_count) return std::nullopt;
    return parsed;
  };
  const std::string count = min_count == max_count ? std::to_string(min_count)
                                                   : std::to_string(min_count) + " to " + std::to_string(max_count);
  const std::string range = range_text(min, max);
  const std::string kind =
      "a list of " + count + (increasing ? " increasing" : "") + " finite decimal numbers in " + range;
  std::string shown;  // the default, as the command line would give it
  for (const double value : values) {
    char buffer[32];
    std::snprintf(buffer, sizeof buffer, "%g", value);
    shown += (shown.empty() ? "" : ",") + std::string(buffer);
  }
  auto in_range = [=](const std::string& text) -> std::string {
    return parse(text) ? std::string() : text + " is not " + kind;
  };
  return cmd
      ->add_option_function<std::string>(
          name, [&values, parse](const std::string& text) { values = *parse(text); }, help)
      ->check(CLI::Validator(in_range, ""))
      ->type_name("LIST of NUMBER in " + range)
      ->default_str(shown);
}

// A size in bytes in [min, max]: a decimal number with an optional binary unit, "4096", "64K",
// "16M", "2G" (K = 1024; "KB" and "KiB" mean the same).
inline CLI::Option* add_byte_size(CLI::App* cmd, const std::string& name, int64_t& value, const std::string& help,
                                  int64_t min, int64_t max) {
  auto to_bytes = [](std::string& text) -> std::string {
    std::string digits = CLI::detail::to_lower(text);
    if (digits.ends_with('b')) digits.pop_back();  // "4096B", "64KB"
    if (digits.size() >= 2 && digits.back() == 'i' && std::strchr("kmg", digits[digits.size() - 2]))
      digits.pop_back();  // "64KiB"
    int shift = 0;
    if (!digits.empty() && (digits.back() == 'k' || digits.back() == 'm' || digits.back() == 'g')) {
      shift = digits.back() == 'k' ? 10 : digits.back() == 'm' ? 20 : 30;
      digits.pop_back();
    }
    int64_t number = 0;
    const char* end = digits.data() + digits.size();
    const auto [stop, error] = std::from_chars(digits.data(), end, number);
    if (digits.empty() || error != std::errc() || stop != end || number < 0 || number > (INT64_MAX >> shift))
      return text + " is not a size such as 4096, 64K or 16M";
    text = std::to_string(number << shift);
    return std::string();
  };
  // CLI11 runs a transform added later first: the unit is applied, then the range checked.
  return add_number(cmd, name, value, help, min, max)
      ->transform(CLI::Validator(to_bytes, ""))
      ->type_name("SIZE in " + range_text(min, max));
}

// An on/off flag, e.g. names "--nesterov,!--no-nesterov". An explicit value must be one of
// true/false, on/off, yes/no, 1/0.
inline CLI::Option* add_switch(CLI::App* cmd, const std::string& names, bool& value, const std::string& help) {
  auto on_or_off = [](const std::string& text) -> std::string {
    std::string word = CLI::detail::to_lower(text);
    for (const char* known : {"true", "false", "on", "off", "yes", "no", "1", "0"})
      if (word == known) return std::string();
    return text + " is not one of true/false, on/off, yes/no, 1/0";
  };
  return cmd->add_flag(names, value, help)->check(CLI::Validator(on_or_off, ""));
}

// --data, for every command that reads a dataset: a folder, never empty, since an empty value is most
// often an unset variable (--data "$DATA"), which must not fall back to the synthetic data in silence.
inline CLI::Option* add_data_option(CLI::App* cmd, std::string& value, const std::string& help) {
  auto named = [](const std::string& text) -> std::string {
    return text.empty() ? "--data \"\": an empty folder name (an unset variable?)" : "";
  };
  return cmd->add_option("--data", value, help)->check(CLI::Validator(named, ""));
}

// --batchnorm, for train and bench-step: which of the GPU's batch norm implementations runs
// (nn/context.h's BatchNormImplementation, read with parse_batchnorm).
inline CLI::Option* add_batchnorm_option(CLI::App* cmd, std::string& value) {
  return cmd
      ->add_option("--batchnorm", value,
                   "The GPU's batch norm: cooperative (one cooperative launch per pass, holding every multiprocessor), "
                   "split (ordinary launches, the last block merging; the same results bit for bit) or cudnn "
                   "(cuDNN's own, as a yardstick)")
      ->capture_default_str()
      ->check(CLI::IsMember({"cooperative", "split", "cudnn"}));
}

// --fusion, for train and bench-step: whether each basic block's bn1 and conv2 run as one fused
// unit (ContextOptions::fusion in nn/context.h). Off until a GPU has measured it.
inline CLI::Option* add_fusion_option(CLI::App* cmd, std::string& value) {
  return cmd
      ->add_option("--fusion", value,
                   "on: each basic block's bn1 and ReLU are applied by conv2 as it reads its input (a cuDNN graph "
                   "with a pointwise prologue), and bn1 computes only its statistics (GPU); off: as before")
      ->capture_default_str()
      ->check(CLI::IsMember({"off", "on"}));
}

// --streams, for train and bench-step: the GPU's two streams, or the main stream alone
// (Note [Side stream] in nn/resnet.cpp).
inline CLI::Option* add_streams_option(CLI::App* cmd, int& value) {
  return add_number(cmd, "--streams", value,
                    "GPU streams: 2 (weight gradients, downsample convolutions and SGD on a side stream) or 1 (all "
                    "on the main stream, to measure what the second buys)",
                    1, 2)
      ->capture_default_str();
}

}  // namespace cutrain
