// The Catch2 test runner's main(); the tests live beside it, one file per area.
#define CATCH_CONFIG_MAIN
#include <catch2/catch.hpp>
