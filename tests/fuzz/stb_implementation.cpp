// The fuzz build's stb: the implementations of the three headers data/image_folder.cpp uses,
// compiled here with the fuzzer's coverage and sanitizers (the other builds link Debian's libstb).
#define STB_IMAGE_IMPLEMENTATION
#include <stb_image.h>
#define STB_IMAGE_RESIZE_IMPLEMENTATION
#include <stb_image_resize.h>
#define STB_IMAGE_WRITE_IMPLEMENTATION
#include <stb_image_write.h>
