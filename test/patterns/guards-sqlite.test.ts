import { sqliteDatabase } from '../support/databases.js';
import { describeGuards } from './guards-contract.js';

describeGuards('SQLite', true, sqliteDatabase);
