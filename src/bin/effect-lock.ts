#!/usr/bin/env node
/**
 * The `effect-lock` executable (`bin` in package.json): inspect, list, watch and force-unlock
 * locks in Redis. `effect-lock --help` describes it; docs/cli.md has the details.
 */
import { main } from "../internal/cli/main.js"

main(process.argv)
