# Installation (FHS paths through GNUInstallDirs) and the Debian package (CPack's DEB generator).
#   cmake --install build --prefix /usr        what a distribution's package would hold
#   cd build && cpack -G DEB                   trimkv-studio_<version>_amd64.deb (packaging/make_deb.sh)
# Installed: bin/trimkv, bin/trimkv-studio; share/trimkv/demo-model (found from the executables'
# own place, bin/../share/trimkv); the .desktop file, hicolor icons (SVG and PNG sizes) and AppStream
# metainfo; man pages trimkv(1) and trimkv-studio(1) made from the programs' own --help by
# help2man; bash completion for trimkv; share/doc/trimkv-studio/{copyright,changelog.gz}.
# The project's libraries are static: nothing of ours goes to lib/.
include(GNUInstallDirs)

set(TRIMKV_PACKAGE_NAME trimkv-studio)
set(TRIMKV_DOC_DIR ${CMAKE_INSTALL_DATADIR}/doc/${TRIMKV_PACKAGE_NAME})
set(TRIMKV_PKG_DIR ${PROJECT_SOURCE_DIR}/packaging/deb)

# Documentation every Debian package carries: the copyright file and a compressed changelog
# (changelog.gz: a native package, its version has no Debian revision).
configure_file(${TRIMKV_PKG_DIR}/changelog.in ${CMAKE_BINARY_DIR}/packaging/changelog @ONLY)
add_custom_command(OUTPUT ${CMAKE_BINARY_DIR}/packaging/changelog.gz
  COMMAND gzip -9nf -k ${CMAKE_BINARY_DIR}/packaging/changelog
  DEPENDS ${CMAKE_BINARY_DIR}/packaging/changelog
  COMMENT "changelog.gz")
add_custom_target(trimkv_package_docs ALL DEPENDS ${CMAKE_BINARY_DIR}/packaging/changelog.gz)
install(FILES ${TRIMKV_PKG_DIR}/copyright ${CMAKE_BINARY_DIR}/packaging/changelog.gz
        DESTINATION ${TRIMKV_DOC_DIR})
install(FILES ${TRIMKV_PKG_DIR}/trimkv.bash-completion DESTINATION ${CMAKE_INSTALL_DATADIR}/bash-completion/completions
        RENAME trimkv)

# Man pages from the programs' own help (help2man; packaging/setup.sh installs it).
find_program(HELP2MAN help2man)
if(HELP2MAN)
  set(man_dir ${CMAKE_BINARY_DIR}/packaging/man)
  add_custom_command(OUTPUT ${man_dir}/trimkv.1.gz
    COMMAND ${CMAKE_COMMAND} -E make_directory ${man_dir}
    COMMAND sh ${TRIMKV_PKG_DIR}/make_manpage.sh $<TARGET_FILE:trimkv> trimkv ${man_dir}
    DEPENDS trimkv ${TRIMKV_PKG_DIR}/make_manpage.sh
    COMMENT "man page trimkv(1)")
  set(man_pages ${man_dir}/trimkv.1.gz)
  if(TARGET trimkv-studio)
    add_custom_command(OUTPUT ${man_dir}/trimkv-studio.1.gz
      COMMAND ${CMAKE_COMMAND} -E make_directory ${man_dir}
      COMMAND sh ${TRIMKV_PKG_DIR}/make_manpage.sh $<TARGET_FILE:trimkv-studio> trimkv-studio ${man_dir}
      DEPENDS trimkv-studio ${TRIMKV_PKG_DIR}/make_manpage.sh
      COMMENT "man page trimkv-studio(1)")
    list(APPEND man_pages ${man_dir}/trimkv-studio.1.gz)
  endif()
  add_custom_target(trimkv_man_pages ALL DEPENDS ${man_pages})
  install(FILES ${man_pages} DESTINATION ${CMAKE_INSTALL_MANDIR}/man1)
else()
  message(STATUS "help2man not found: no man pages (packaging/setup.sh installs it)")
endif()

# The Debian package.
set(CPACK_PACKAGE_NAME ${TRIMKV_PACKAGE_NAME})
set(CPACK_PACKAGE_VERSION ${PROJECT_VERSION})
set(CPACK_PACKAGE_VENDOR "TrimKV Studio developers")
# The maintainer address is a placeholder until the project has one of its own.
set(CPACK_PACKAGE_CONTACT "TrimKV Studio developers <trimkv-studio@example.org>")
set(CPACK_PACKAGE_DESCRIPTION_SUMMARY "vision-language chat with a live view of the KV cache under eviction")
set(CPACK_DEBIAN_PACKAGE_DESCRIPTION
    "TrimKV Studio runs vision-language and text models on the CPU with their\n\
KV cache held under one global memory budget by a learned eviction policy\n\
(DBTrimKV) or one of eleven baselines, and shows, live, which text and image\n\
entries every layer and head keeps. It reads Hugging Face checkpoints\n\
(SmolVLM, Qwen2-VL, Qwen2.5-VL, Qwen3-VL, Llama, Qwen2, Qwen3) and GGUF files,\n\
held as float32, bfloat16, float16, q8_0 or q4_0. A small demo model is\n\
included.\n\
.\n\
This package holds the desktop application trimkv-studio and the command\n\
line trimkv.")
set(CPACK_PACKAGING_INSTALL_PREFIX /usr)
set(CPACK_STRIP_FILES ON)
set(CPACK_DEBIAN_FILE_NAME DEB-DEFAULT)
set(CPACK_DEBIAN_PACKAGE_SECTION science)
set(CPACK_DEBIAN_PACKAGE_PRIORITY optional)
set(CPACK_DEBIAN_PACKAGE_SHLIBDEPS ON)  # runtime dependencies from the binaries' libraries, plus
# what no library names: the OpenMP OpenBLAS (LibTorch's matmuls are ~25x slower on the reference
# BLAS) and Qt's platform plugins (the xcb one draws the window).
set(CPACK_DEBIAN_PACKAGE_DEPENDS "libopenblas0-openmp, qt6-qpa-plugins")
set(CPACK_DEBIAN_PACKAGE_CONTROL_STRICT_PERMISSION ON)
set(CPACK_GENERATOR DEB)
include(CPack)
