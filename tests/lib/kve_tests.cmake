# The test helper library and the one way a ctest test is registered.
# Included by every tests/*/CMakeLists.txt (tests/fuzz, tests/tsan and
# tests/stats are added from the top level, sometimes without tests/).
include_guard(GLOBAL)

# kve_testlib: tests/lib's headers (kve_suite.h, kve_expect.h,
# kve_test_util.h, kve_test_base.h, kve_test_state.h, kve_scored_model.h,
# kve_score_case.h; kve_cases' too, whose sources tests/lib/CMakeLists.txt
# compiles) and the generated golden tables (tests/golden's, and
# tools/golden's golden_vectors.h, which the installed CLI compiles too),
# for every suite through its include path.
# The suites test the experimental API too: every target linking kve_testlib
# sees include/kvevict.h's KVE_EXPERIMENTAL section.
add_library(kve_testlib INTERFACE)
target_include_directories(kve_testlib INTERFACE
  ${PROJECT_SOURCE_DIR}/tests/lib ${PROJECT_SOURCE_DIR}/tests/golden
  ${PROJECT_SOURCE_DIR}/tools/golden)
target_compile_definitions(kve_testlib INTERFACE KVE_EXPERIMENTAL)

# ${PROJECT_BINARY_DIR}/kve_gpu_test_targets.txt: the build targets the
# tests labelled gpu or gpu-load run (a command's first word that is a
# target, and every $<TARGET_FILE:t>), one a line, written afresh at the end
# of each configure. bench/gpu_check.sh builds them from it: before they are
# built, ctest gives no command for a test whose executable does not exist.
set_property(GLOBAL PROPERTY KVE_GPU_TEST_WORDS "")
function(kve_write_gpu_test_targets)
  get_property(words GLOBAL PROPERTY KVE_GPU_TEST_WORDS)
  set(targets "")
  foreach(w IN LISTS words)
    if(TARGET ${w})
      list(APPEND targets ${w})
    endif()
  endforeach()
  list(REMOVE_DUPLICATES targets)
  list(JOIN targets "\n" text)
  file(WRITE ${PROJECT_BINARY_DIR}/kve_gpu_test_targets.txt "${text}\n")
endfunction()
cmake_language(DEFER DIRECTORY ${PROJECT_SOURCE_DIR} CALL kve_write_gpu_test_targets)

# kve_add_test(NAME n COMMAND cmd... [LABELS ...] [ENV ...] [TIMEOUT s]
#              [SKIP_RETURN_CODE c] [PASS_REGULAR_EXPRESSION re] [WILL_FAIL]
#              [RUN_SERIAL] [COST c])
# The one registration of a ctest test: every entry of tests/ is added here,
# a Check suite's groups through kve_add_check_suite() below. COST: about
# the seconds the test takes; ctest -j starts the costly ones first, so a
# fresh build's run (no timings on record yet) does not end on a long test
# running alone.
function(kve_add_test)
  cmake_parse_arguments(T "WILL_FAIL;RUN_SERIAL" "NAME;TIMEOUT;SKIP_RETURN_CODE;PASS_REGULAR_EXPRESSION;COST"
                        "COMMAND;LABELS;ENV" ${ARGN})
  if(NOT T_NAME OR NOT T_COMMAND OR T_UNPARSED_ARGUMENTS)
    message(FATAL_ERROR "kve_add_test(${T_NAME}): NAME and COMMAND, not ${T_UNPARSED_ARGUMENTS}")
  endif()
  add_test(NAME ${T_NAME} COMMAND ${T_COMMAND})
  if("gpu" IN_LIST T_LABELS OR "gpu-load" IN_LIST T_LABELS)
    list(GET T_COMMAND 0 words)
    foreach(arg IN LISTS T_COMMAND)
      if(arg MATCHES "^\\$<TARGET_FILE:([A-Za-z0-9_.+-]+)>$")
        list(APPEND words ${CMAKE_MATCH_1})
      endif()
    endforeach()
    set_property(GLOBAL APPEND PROPERTY KVE_GPU_TEST_WORDS ${words})
  endif()
  if(T_ENV)
    set_tests_properties(${T_NAME} PROPERTIES ENVIRONMENT "${T_ENV}")
  endif()
  if(T_LABELS)
    set_tests_properties(${T_NAME} PROPERTIES LABELS "${T_LABELS}")
  endif()
  foreach(prop TIMEOUT SKIP_RETURN_CODE PASS_REGULAR_EXPRESSION COST)
    if(DEFINED T_${prop})
      set_tests_properties(${T_NAME} PROPERTIES ${prop} "${T_${prop}}")
    endif()
  endforeach()
  foreach(prop WILL_FAIL RUN_SERIAL)
    if(T_${prop})
      set_tests_properties(${T_NAME} PROPERTIES ${prop} TRUE)
    endif()
  endforeach()
endfunction()

# kve_add_check_suite(PREFIX p TARGET exe SOURCES files... [SINGLE] [ARGS ...]
#                     [ENV ...] [LABELS ...] [TIMEOUT s] [SKIP_RETURN_CODE c]
#                     [COSTS group=seconds ...])
# The registration of a Check suite (tests/lib/kve_suite.h): reads the
# KVE_TEST(group, name) / KVE_LOOP_TEST(group, name, lo, hi) lines of the
# sources, the same list main() compiles, and adds one ctest test per group,
# p_group (p itself with SINGLE, which allows one group), that tells the
# runner its group, how many entries were read for it and every group read.
# The runner fails when the compiled list has another group or entry count,
# when Check ran fewer runs than the list gives, or when nothing ran.
function(kve_add_check_suite)
  cmake_parse_arguments(S "SINGLE" "PREFIX;TARGET;TIMEOUT;SKIP_RETURN_CODE" "SOURCES;ARGS;ENV;LABELS;COSTS"
                        ${ARGN})
  set(groups "")
  foreach(src IN LISTS S_SOURCES)
    get_filename_component(path ${src} ABSOLUTE)
    set_property(DIRECTORY APPEND PROPERTY CMAKE_CONFIGURE_DEPENDS ${path})
    file(STRINGS ${path} lines REGEX "^[ \t]*KVE_(LOOP_)?TEST\\(")
    foreach(line IN LISTS lines)
      # (Two tests: one MATCHES after another that matched clears CMAKE_MATCH_1.)
      if(line MATCHES "^[ \t]*KVE_TEST\\(([A-Za-z0-9_]+), *[A-Za-z0-9_]+\\),?[ \t]*$")
        set(g ${CMAKE_MATCH_1})
      elseif(line MATCHES "^[ \t]*KVE_LOOP_TEST\\(([A-Za-z0-9_]+), *[A-Za-z0-9_]+, [^,()]+, [^,()]+\\),?[ \t]*$")
        set(g ${CMAKE_MATCH_1})
      else()
        message(FATAL_ERROR "${src}: \"${line}\": write one KVE_TEST(group, name) or "
                            "KVE_LOOP_TEST(group, name, lo, hi) per line")
      endif()
      if(NOT DEFINED entries_${g})
        list(APPEND groups ${g})
        set(entries_${g} 0)
      endif()
      math(EXPR entries_${g} "${entries_${g}} + 1")
    endforeach()
  endforeach()
  list(LENGTH groups n_groups)
  if(n_groups EQUAL 0)
    message(FATAL_ERROR "kve_add_check_suite(${S_PREFIX}): ${S_SOURCES} list no KVE_TEST")
  endif()
  if(S_SINGLE AND n_groups GREATER 1)
    message(FATAL_ERROR "kve_add_check_suite(${S_PREFIX}): SINGLE, but groups ${groups}")
  endif()
  foreach(g IN LISTS groups)
    set(name ${S_PREFIX}_${g})
    if(S_SINGLE)
      set(name ${S_PREFIX})
    endif()
    string(REPLACE ";" "," all_groups "${groups}")
    set(env "KVE_SUITE_GROUP=${g}" "KVE_SUITE_ENTRIES=${entries_${g}}"
            "KVE_SUITE_GROUPS=${all_groups}" ${S_ENV})
    set(timeout ${S_TIMEOUT})
    if(KVE_SANITIZE)
      # ASan + UBSan in a Debug build run several times slower: Check's
      # per-test timeouts and ctest's grow with them.
      list(APPEND env "CK_TIMEOUT_MULTIPLIER=4")
      if(NOT timeout)
        set(timeout 3600)
      endif()
    endif()
    set(props ENV ${env})
    if(S_LABELS)
      list(APPEND props LABELS ${S_LABELS})
    endif()
    if(timeout)
      list(APPEND props TIMEOUT ${timeout})
    endif()
    if(S_SKIP_RETURN_CODE)
      list(APPEND props SKIP_RETURN_CODE ${S_SKIP_RETURN_CODE})
    endif()
    foreach(c IN LISTS S_COSTS) # kve_add_test's COST, for the groups named
      if(c MATCHES "^${g}=([0-9]+)$")
        list(APPEND props COST ${CMAKE_MATCH_1})
      endif()
    endforeach()
    kve_add_test(NAME ${name} COMMAND ${S_TARGET} ${S_ARGS} ${props})
  endforeach()
endfunction()

