from verl_ebpo.tools.preflight import main

if __name__ == "__main__":
    raise SystemExit(main())
