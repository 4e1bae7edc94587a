import * as effectEslint from "@effect/eslint-plugin"
import js from "@eslint/js"
import { defineConfig, globalIgnores } from "eslint/config"
import tseslint from "typescript-eslint"

export default defineConfig(
  globalIgnores(["dist/", "node_modules/", ".scratch/", "coverage/", ".bench-tmp/"]),
  {
    files: ["**/*.{ts,mts,cts,js,mjs,cjs}"],
    extends: [js.configs.recommended, tseslint.configs.recommended, effectEslint.configs.dprint],
    linterOptions: {
      reportUnusedDisableDirectives: "error"
    },
    rules: {
      // the Effect monorepo's formatting (its eslint.config.mjs)
      "@effect/dprint": [
        "error",
        {
          config: {
            indentWidth: 2,
            lineWidth: 120,
            semiColons: "asi",
            quoteStyle: "alwaysDouble",
            trailingCommas: "never",
            operatorPosition: "maintain",
            "arrowFunction.useParentheses": "force"
          }
        }
      ],
      "@typescript-eslint/consistent-type-imports": "error",
      // unused bindings: reported by the typescript-eslint rule, so the core one is off
      "no-unused-vars": "off",
      "@typescript-eslint/no-unused-vars": [
        "error",
        { argsIgnorePattern: "^_", varsIgnorePattern: "^_", caughtErrorsIgnorePattern: "^_" }
      ],
      "sort-imports": "off"
    }
  },
  {
    // the library itself; tests, bench, scripts and examples may use `!` and the console
    files: ["src/**/*.ts"],
    rules: {
      "@typescript-eslint/no-non-null-assertion": "error",
      "no-console": "error"
    }
  }
)
